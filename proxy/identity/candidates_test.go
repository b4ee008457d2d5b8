package identity

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A child cgroup removed while the sandbox's cgroup is listed (a job that
// ended) takes only its own processes with it: the listing stands, and the
// lookup is not denied as identity_unknown for it. The removal is staged
// with a cgroup.procs that is a dangling link: the file the walk found is
// gone when it is read.
func TestCgroupPIDsSurvivesAChildRemovedMidWalk(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte("1\n2\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "job", "gone"), 0o755)
	os.WriteFile(filepath.Join(root, "job", "cgroup.procs"), []byte("3\n"), 0o644)
	os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "job", "gone", "cgroup.procs"))
	pids, err := Cgroup(root).PIDs()
	if err != nil || !reflect.DeepEqual(pids, []int{1, 2, 3}) {
		t.Fatalf("PIDs = %v, %v; want [1 2 3]", pids, err)
	}
	if _, err := Cgroup(filepath.Join(root, "missing")).PIDs(); err == nil {
		t.Fatal("PIDs of a cgroup that does not exist: no error")
	}
	os.Remove(filepath.Join(root, "cgroup.procs"))
	os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "cgroup.procs"))
	if _, err := Cgroup(root).PIDs(); err == nil {
		t.Fatal("PIDs with the sandbox's own cgroup.procs gone: no error")
	}
}

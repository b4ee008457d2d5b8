package identity

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A process placed in a cgroup leaf is described with that leaf's path, in
// the form cgroup2.Path gives for the leaf's directory.
func TestDescribeReadsTheCgroup(t *testing.T) {
	testutil.RequireRoot(t, "cgroup v2 leaves")
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	name := "airlock-test-cgroup-" + strconv.Itoa(os.Getpid())
	leaf, err := cgroup2.Create(mnt, name)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait(); cgroup2.Remove(leaf) }()
	if err := cgroup2.Add(leaf, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	plain := treeResolver(t)
	if p, err := plain.describe(cmd.Process.Pid, 0, os.Geteuid()); err != nil || p.Cgroup != "" {
		t.Fatalf("describe without WithCgroups = %+v, %v; want no cgroup read", p, err)
	}
	r := treeResolver(t)
	r.WithCgroups()
	p, err := r.describe(cmd.Process.Pid, 0, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	want, err := cgroup2.Path(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cgroup != "/"+name || p.Cgroup != want {
		t.Fatalf("describe(pid in %s).Cgroup = %q; want %q (cgroup2.Path %q)", leaf, p.Cgroup, "/"+name, want)
	}
}

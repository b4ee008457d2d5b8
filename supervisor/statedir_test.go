package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The state directory is made 0711, or one there is checked: a directory
// another user may write (/tmp among them) is refused, and one of the
// pod's own keeps its mode but for the traversal the services need.
func TestStateDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	link := filepath.Join(base, "link")
	os.Symlink(mk("target", 0o700), link)
	openParent := mk("openparent", 0o777)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	for _, tc := range []struct {
		name string
		dir  string
		mode os.FileMode // after, when ok
		err  string
	}{
		{"new", filepath.Join(base, "new", "state"), 0o711, ""},
		{"the pod's own, closed", mk("closed", 0o700), 0o711, ""},
		{"the pod's own, open to read", mk("readable", 0o755), 0o755, ""},
		{"writable by others", mk("open", 0o777), 0, "lets another user write"},
		{"shared and sticky, as /tmp", mk("sticky", 0o1777), 0, "lets another user write"},
		{"a link of the pod's to a directory of its own", link, 0o711, ""},
		{"a file", file, 0, "not a directory"},
		{"new, under a directory others may write", filepath.Join(openParent, "state"), 0, "writable by group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := stateDir(tc.dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("stateDir = %v; want it refused: %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(tc.dir); fi.Mode().Perm() != tc.mode {
				t.Errorf("mode after = %04o; want %04o", fi.Mode().Perm(), tc.mode)
			}
		})
	}
}

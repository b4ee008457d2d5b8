package trusted

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// OpenDir follows a link only as Links would pass it (root's or this
// user's, in directories no other user may write), and opens the
// directory the walk reached; OpenDirTrust says too whether it and every
// directory the walk went through are ones no other user may write.
func TestOpenDir(t *testing.T) {
	testutil.RequireRoot(t, "links owned by another user")
	dir, err := os.MkdirTemp("", "airlock-opendir-") // under /tmp: sticky
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	mkdir := func(name string, perm os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, perm); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, perm)
		return p
	}
	link := func(name, to string, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		os.Lchown(p, uid, uid)
		return p
	}
	target := mkdir("target", 0o755)
	mkdir("target/sub", 0o755)
	open := mkdir("open", 0o777) // others may write: its links are theirs
	inOpenDir := mkdir("open/sub", 0o755)
	inOpen := link("open/link", target, 0)
	toOpen := link("toopen", open, 0)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		name, path string
		want       string // the directory opened; "" refused
		trusted    bool   // OpenDirTrust's word
	}{
		{"a directory", target, target, true},
		{"root's link in root's directory", link("good", target, 0), target, true},
		{"a directory others may write, no link", open, open, false},
		// Root's and 0755, but another user may rename another in.
		{"root's directory in one others may write", inOpenDir, inOpenDir, false},
		{"another user's link", link("theirs", target, 61000), "", false},
		{"root's link in a directory others may write", inOpen, "", false},
		{"a link to that link", link("twohops", inOpen, 0), "", false},
		{"that link after a .. past a link", toOpen + "/../open/link", "", false},
		// As the kernel reads it: the parent of where the link leads,
		// not the link's own directory.
		{"a .. after a link", link("deep", filepath.Join(target, "sub"), 0) + "/../", target, true},
		{"a .. out of a directory others may write", inOpenDir + "/../../target", target, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, trusted, err := OpenDirTrust(tc.path)
			if tc.want == "" {
				if !errors.Is(err, ErrUntrusted) {
					t.Fatalf("OpenDir(%s) = %v; want it refused", tc.path, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenDir(%s): %v", tc.path, err)
			}
			defer f.Close()
			if trusted != tc.trusted {
				t.Errorf("OpenDirTrust(%s) trusted = %v; want %v", tc.path, trusted, tc.trusted)
			}
			var got, want syscall.Stat_t
			syscall.Fstat(int(f.Fd()), &got)
			syscall.Stat(tc.want, &want)
			if got.Ino != want.Ino || got.Dev != want.Dev {
				t.Errorf("OpenDir(%s) opened inode %d; want %s's, %d", tc.path, got.Ino, tc.want, want.Ino)
			}
		})
	}
	if _, err := OpenDir(file); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("OpenDir of a file = %v; want ENOTDIR", err)
	}
}

package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A file the sandbox's uid owns keeps its mode and times, given to read or
// not given at all: Landlock has no right for chmod or utimes, and a
// secret made world-readable, or a binary made setuid, would stay so on the
// host. Where the sandbox is given to write it does both, and writes; a
// mount there the host has read-only stays read-only, and one it has
// writable stays writable.
func TestHostIsReadOnlyButWhereGiven(t *testing.T) {
	root := rootDir(t, 0o755)
	c := base(t)
	file := func(p string) string {
		p = filepath.Join(root, p)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(p, c.UID, c.GID)
		return p
	}
	dir := func(p string) string {
		p = filepath.Join(root, p)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(p, c.UID, c.GID)
		return p
	}
	bind := func(src, dst string, ro bool) {
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
		if ro {
			if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	given, notGiven := file("given"), file("not-given")
	work := dir("work")
	inWork := file("work/f")
	bind(dir("ro-src"), dir("work/ro"), true)
	bind(dir("rw-src"), dir("work/rw"), false)
	c.RO = append(c.RO, given)
	c.RW = append(c.RW, work)
	script := `for f in "$@"; do chmod 4777 "$f"; touch -d 2001-01-01 "$f"; done
echo y > ` + work + `/new; echo y > ` + work + `/ro/new; echo y > ` + work + `/rw/new; exit 0`
	c.Command = []string{"/bin/sh", "-c", script, "sh", given, notGiven, inWork}
	out, code, err := run(t, c)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	for _, tc := range []struct {
		path     string
		changed  bool
		whatItIs string
	}{
		{given, false, "given to read"},
		{notGiven, false, "not given"},
		{inWork, true, "in the directory given to write"},
	} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		changed := fi.Mode()&os.ModeSetuid != 0 || fi.ModTime().Year() == 2001
		if changed != tc.changed {
			t.Errorf("a file %s: mode %v, modified %v; want it changed by the sandbox: %v", tc.whatItIs, fi.Mode(), fi.ModTime(), tc.changed)
		}
	}
	for p, want := range map[string]bool{"work/new": true, "work/ro/new": false, "work/rw/new": true} {
		_, err := os.Stat(filepath.Join(root, p))
		if (err == nil) != want {
			t.Errorf("%s written by the sandbox: %v; want %v", p, err == nil, want)
		}
	}
}

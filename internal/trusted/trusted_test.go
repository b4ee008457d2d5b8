package trusted

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A file is trusted when it and every directory above it are owned by
// root (or this user) and writable by no one else; a sticky directory
// others may write (/tmp) does not spoil what is below it.
func TestPath(t *testing.T) {
	testutil.RequireRoot(t, "files owned by another user")
	dir, err := os.MkdirTemp("", "airlock-trusted-") // under /tmp: sticky
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	file := func(name string, perm os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", 0o755, 0)
	link := filepath.Join(dir, "link")
	os.Symlink(filepath.Join(dir, "theirs"), link)
	sub := filepath.Join(dir, "open")
	os.Mkdir(sub, 0o777)
	os.Chmod(sub, 0o777)
	inOpen := filepath.Join(sub, "f")
	os.WriteFile(inOpen, []byte("x"), 0o755)
	// A link to root's file, in a directory another user may write: they
	// can point it elsewhere once it has been checked.
	openLink := filepath.Join(sub, "link")
	os.Symlink(good, openLink)
	// A trusted link to a trusted file passes.
	goodLink := filepath.Join(dir, "goodlink")
	os.Symlink(good, goodLink)
	// A ".." after a link is where the link leads's parent, as the kernel
	// reads it: goodlink-to-open/sub/../f is open/f, in the open directory.
	os.Mkdir(filepath.Join(sub, "sub"), 0o755)
	toSub := filepath.Join(dir, "tosub")
	os.Symlink(filepath.Join(sub, "sub"), toSub)
	dotdot := toSub + "/../f"
	// A link to a link in a directory others may write, to root's file.
	second := filepath.Join(sub, "second")
	os.Symlink(good, second)
	twoHops := filepath.Join(dir, "twohops")
	os.Symlink(second, twoHops)
	for _, tc := range []struct {
		name string
		path string
		ok   bool
	}{
		{"root's, under a sticky /tmp", good, true},
		{"group-writable", file("group", 0o775, 0), false},
		{"another user's", file("theirs", 0o755, 61000), false},
		{"a link to another user's", link, false},
		{"in a directory others may write", inOpen, false},
		{"a link in a directory others may write, to root's", openLink, false},
		{"root's link to root's", goodLink, true},
		{"a .. after a link into a directory others may write", dotdot, false},
		{"a link to a link in a directory others may write", twoHops, false},
	} {
		err := Path(tc.path)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUntrusted)) {
			t.Errorf("%s: Path = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}

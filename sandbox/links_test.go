package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// A path given through a link the sandbox's uid could have made or
// replaced (in a directory it may write: its workspace, a sticky one where
// the link is its own) is refused, naming the link; one only root could
// have made is followed.
func TestPlantedLinksAreRefused(t *testing.T) {
	testutil.RequireRoot(t, "files of another uid")
	const uid, gid = 61000, 61000
	root := t.TempDir()
	os.Chmod(root, 0o755)
	mk := func(name string, mode os.FileMode, owner int) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, mode) // past the umask, and the sticky bit
		os.Chown(d, owner, owner)
		return d
	}
	link := func(dir, name string, owner int) string {
		l := filepath.Join(dir, name)
		if err := os.Symlink("/", l); err != nil {
			t.Fatal(err)
		}
		os.Lchown(l, owner, owner)
		return l
	}
	work := mk("work", 0o755, uid)   // the sandbox's own
	shared := mk("shared", 0o775, 0) // its group's
	os.Chown(shared, 0, gid)
	sticky := mk("sticky", 0o777|os.ModeSticky, 0) // /tmp's kind
	system := mk("system", 0o755, 0)               // root's alone
	locked := mk("locked", 0o555, uid)             // its own, made read-only by it
	// Root's link to the sandbox's workspace, and a path stepping back
	// out of the sandbox's link: each reaches a link it made.
	if err := os.Symlink(filepath.Join(work, "data"), filepath.Join(system, "data")); err != nil {
		t.Fatal(err)
	}
	link(work, "data", 0)
	link(work, "up", 0)
	for _, tc := range []struct {
		name, path string
		refused    bool
	}{
		{"a link in its own directory", link(work, "cfg", 0), true},
		{"a directory below such a link", filepath.Join(link(work, "etc", 0), "passwd"), true},
		{"a link in its group's directory", link(shared, "cfg", 0), true},
		{"its own link in a sticky directory", link(sticky, "mine", uid), true},
		{"root's link in a sticky directory", link(sticky, "roots", 0), false},
		{"root's link in root's directory", link(system, "cfg", 0), false},
		{"its own directory, no link", work, false},
		{"a link in its own directory it made read-only", link(locked, "cfg", 0), true},
		{"root's link to its link", filepath.Join(system, "data"), true},
		{"a step back after its link", filepath.Join(work, "up", "..", "etc"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{UID: uid, GID: gid, RO: []string{tc.path}}
			err := resolveGiven(c)
			if tc.refused != (err != nil) || err != nil && !strings.Contains(err.Error(), "leads through the link") {
				t.Errorf("resolveGiven(--ro %s) = %v; want refused %v", tc.path, err, tc.refused)
			}
			// And Landlock's open of it, a component at a time.
			fd, err := openGiven(tc.path, uid, gid)
			if err == nil {
				// The file the kernel's own resolution reaches.
				var got, want unix.Stat_t
				unix.Fstat(fd, &got)
				unix.Stat(tc.path, &want)
				if got.Dev != want.Dev || got.Ino != want.Ino {
					t.Errorf("openGiven(%s) opened inode %d, not the path's %d", tc.path, got.Ino, want.Ino)
				}
				unix.Close(fd)
			}
			if tc.refused != (err != nil) || err != nil && !strings.Contains(err.Error(), "leads through the link") {
				t.Errorf("openGiven(%s) = %v; want refused %v", tc.path, err, tc.refused)
			}
		})
	}
}

// The launch refuses it, as its init's step, before anything is mounted:
// given to read, or as its working directory, which a sandbox's link in
// its workspace would point at a directory of the host's /tmp (a tmux
// server's sockets), mounted back into its private /tmp.
func TestLaunchRefusesAPlantedLink(t *testing.T) {
	testutil.RequireRoot(t, "the sandbox launcher")
	sockets := t.TempDir() // below the host's /tmp, where tmux's are
	for _, tc := range []struct {
		name string
		give func(c *Config, link string)
	}{
		{"given to read", func(c *Config, link string) { c.RO = append(c.RO, link) }},
		{"its working directory", func(c *Config, link string) { c.Dir = link }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base(t, "/bin/true")
			work := rootDir(t, 0o755)
			os.Chown(work, c.UID, c.GID) // the sandbox's own workspace, --rw
			link := filepath.Join(work, "cfg")
			if err := os.Symlink(sockets, link); err != nil {
				t.Fatal(err)
			}
			c.RW = append(c.RW, work)
			tc.give(&c, link)
			_, _, err := run(t, c)
			var se *SetupError
			if !errors.As(err, &se) || !strings.Contains(se.Err, "leads through the link "+link) {
				t.Fatalf("launch given %s, a link in its own workspace: %v; want it refused for the link", link, err)
			}
		})
	}
}

// Where a path the sandbox names leads is found once, by the init's first
// look: a link swapped in after it (by a sandbox of the same uid running
// meanwhile) does not lead the steps that mount paths back elsewhere, to a
// directory of the host's sockets below /tmp.
func TestGivenPathsAreResolvedOnce(t *testing.T) {
	root := t.TempDir()
	cwd, sockets := filepath.Join(root, "cwd"), filepath.Join(root, "sockets")
	for _, d := range []string{cwd, sockets} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &Config{UID: 61000, GID: 61000, Dir: cwd}
	if err := resolveGiven(c); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cwd, cwd+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sockets, cwd); err != nil {
		t.Fatal(err)
	}
	if now, _ := filepath.EvalSymlinks(cwd); now != sockets {
		t.Fatalf("the swap: %s leads to %s; want %s", cwd, now, sockets)
	}
	if got := namedPaths(c, []string{cwd}); len(got) != 1 || got[0].real != cwd {
		t.Fatalf("namedPaths after the swap = %+v; want %s where the init found it", got, cwd)
	}
}

// A path the sandbox names below a hidden directory (the uid's home) that
// is missing when the init looks, and is made again before the sandbox
// opens it (by a sandbox of the same uid, at the right moment), leaves the
// directory covered all the same: left as it is, the whole home would
// show, its agents' and editors' sockets with it.
func TestHiddenDirStaysCoveredForAMissingPath(t *testing.T) {
	home := t.TempDir()
	secret := filepath.Join(home, "agent.sock")
	if err := os.WriteFile(secret, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(home, "work")
	c := &Config{UID: 61000, GID: 61000, Hidden: []string{home}, RO: []string{work}}
	inMountNamespace(t, func() error {
		if err := resolveGiven(c); err != nil {
			return err
		}
		if err := os.Mkdir(work, 0o755); err != nil { // made again, after the look
			return err
		}
		if err := hideDirs(c); err != nil {
			return err
		}
		if _, err := os.Stat(secret); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s after hideDirs: %v; want it covered", secret, err)
		}
		return nil
	})
}

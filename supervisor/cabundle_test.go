package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A launch's CA bundle goes in TMPDIR only where no other user could put
// another directory in its place: root removes it by its path. Else, and
// for a relative TMPDIR (its reaper runs from /), it goes in /tmp.
func TestCABundleDirIsRootsToRemove(t *testing.T) {
	testutil.RequireRoot(t, "a directory another user owns")
	base := t.TempDir()
	others := filepath.Join(base, "others")
	own := filepath.Join(base, "own")
	for _, d := range []string{others, own} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(others, 61000, 61000); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tmpdir, want string }{
		{own, own + "/"},
		{others, "/tmp/"},
		{"relative", "/tmp/"},
	} {
		t.Setenv("TMPDIR", tc.tmpdir)
		dir, err := caBundleDir()
		if err != nil {
			t.Fatalf("TMPDIR=%s: %v", tc.tmpdir, err)
		}
		os.RemoveAll(dir)
		if !strings.HasPrefix(dir, tc.want+"airlock-ca-") {
			t.Errorf("TMPDIR=%s: the CA bundle's directory is %s, want one in %s", tc.tmpdir, dir, tc.want)
		}
	}
}

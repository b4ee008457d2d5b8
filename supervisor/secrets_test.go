package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// A secret file is read as root into a sandboxed service's environment:
// one in a directory another user may write (who could make it a link to
// a file only root may read) fails the boot; one only root could change
// is read.
func TestReadSecretsTrustsOnlyRootsFiles(t *testing.T) {
	good := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(good, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readSecrets(map[string]manifest.Secret{"TOKEN": {File: good}})
	if err != nil || !slices.Equal(got, []string{"TOKEN=s3cret"}) {
		t.Fatalf("readSecrets(a file of root's) = %q, %v; want TOKEN=s3cret", got, err)
	}
	open := t.TempDir()
	os.Chmod(open, 0o777)
	planted := filepath.Join(open, "token")
	if err := os.Symlink(good, planted); err != nil {
		t.Fatal(err)
	}
	if got, err := readSecrets(map[string]manifest.Secret{"TOKEN": {File: planted}}); err == nil || !strings.Contains(err.Error(), "secret TOKEN") {
		t.Fatalf("readSecrets(a link in a directory anyone may write) = %q, %v; want it refused", got, err)
	}
}

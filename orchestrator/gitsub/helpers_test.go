package gitsub

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// bareRemote is a bare repository in a temp dir with one commit on main
// (its HEAD), as an operator's spawn remote starts.
func bareRemote(t *testing.T) string {
	t.Helper()
	testutil.RequireTool(t, "git")
	dir := t.TempDir()
	bare := filepath.Join(dir, "remote.git")
	seed := filepath.Join(dir, "seed")
	gitIn(t, "", nil, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	gitIn(t, "", nil, "init", "--quiet", "--initial-branch=main", seed)
	if err := os.WriteFile(filepath.Join(seed, "README"), []byte("spawn state\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, seed, nil, "add", "README")
	gitIn(t, seed, nil, "commit", "--quiet", "-m", "seed")
	gitIn(t, seed, nil, "push", "--quiet", bare, "main")
	return bare
}

// gitIn runs git in dir (with a fixed identity and env added) and returns
// its trimmed output.
func gitIn(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), identity...), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

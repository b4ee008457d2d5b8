package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRemote is a bare git repository in a temp dir with one commit on main
// (its HEAD), as the git substrate's remote starts; tests push spawn
// branches to it by path.
func GitRemote(t testing.TB) string {
	t.Helper()
	RequireTool(t, "git")
	dir := t.TempDir()
	bare, seed := filepath.Join(dir, "remote.git"), filepath.Join(dir, "seed")
	Git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	Git(t, "", "init", "--quiet", "--initial-branch=main", seed)
	if err := os.WriteFile(filepath.Join(seed, "README"), []byte("spawn state\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, seed, "add", "README")
	Git(t, seed, "commit", "--quiet", "-m", "seed")
	Git(t, seed, "push", "--quiet", bare, "main")
	return bare
}

// Git runs git in dir, as a test identity, and returns its trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@localhost",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

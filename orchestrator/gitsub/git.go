package gitsub

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// repo is a scratch bare repository this process owns: objects are built
// and fetched into it, never into an operator's checkout.
type repo struct {
	dir string
	git string // the git binary
}

// newRepo makes a scratch bare repository under a fresh temporary directory;
// remove it with close.
func newRepo(ctx context.Context, gitBin string) (*repo, error) {
	dir, err := os.MkdirTemp("", "airlock-gitsub-")
	if err != nil {
		return nil, fmt.Errorf("scratch repository: %w", err)
	}
	r := &repo{dir: dir, git: gitBin}
	if _, err := r.run(ctx, nil, "init", "--bare", "--quiet"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

func (r *repo) close() { os.RemoveAll(r.dir) }

// identity is who commits a spawn: git refuses to commit without one, and
// the operator's own configuration is none of the scratch repository's
// business.
var identity = []string{
	"GIT_AUTHOR_NAME=airlock", "GIT_AUTHOR_EMAIL=airlock@localhost",
	"GIT_COMMITTER_NAME=airlock", "GIT_COMMITTER_EMAIL=airlock@localhost",
}

// run runs git in the scratch repository with extra environment env and
// returns its stdout; a failure names the command and carries git's stderr.
func (r *repo) run(ctx context.Context, env []string, args ...string) ([]byte, error) {
	return r.runIn(ctx, nil, env, args...)
}

// runIn is run with stdin.
func (r *repo) runIn(ctx context.Context, stdin []byte, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.git, args...)
	cmd.Dir = r.dir
	// GIT_DIR pins the scratch repository: a git directory found by
	// searching upwards (the operator's) must never be the one written.
	cmd.Env = append(append(os.Environ(), "GIT_DIR="+r.dir, "GIT_TERMINAL_PROMPT=0"), identity...)
	cmd.Env = append(cmd.Env, env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		shown := make([]string, len(args))
		for i, a := range args {
			shown[i] = redact(a) // a remote's URL may carry a token
		}
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(shown, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// line is run's output as one trimmed line (a hash, a tree).
func (r *repo) line(ctx context.Context, env []string, args ...string) (string, error) {
	out, err := r.run(ctx, env, args...)
	return strings.TrimSpace(string(out)), err
}

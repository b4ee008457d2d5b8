package gitsub

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
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
	// GIT_DIR pins the scratch repository: a git directory found by
	// searching upwards (the operator's) must never be the one written.
	env = append(append(append(os.Environ(), "GIT_DIR="+r.dir, "GIT_TERMINAL_PROMPT=0"), identity...), env...)
	argv, env := credentialsInEnv(args, env)
	cmd := exec.CommandContext(ctx, r.git, argv...)
	cmd.Dir = r.dir
	cmd.Env = env
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

// credentialsInEnv moves an http(s) remote URL's user and password out of
// git's arguments, which every user of the host may read in /proc, into an
// Authorization header in its environment, which only the host's root and
// the supervisor's user may (as the runner sends them).
func credentialsInEnv(args, env []string) ([]string, []string) {
	out := slices.Clone(args)
	for i, a := range args {
		u, err := url.Parse(a)
		if err != nil || u.User == nil || (u.Scheme != "http" && u.Scheme != "https") {
			continue
		}
		pass, _ := u.User.Password()
		basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
		u.User = nil
		out[i] = u.String()
		// After the operator's own GIT_CONFIG_* entries, if any.
		n := 0
		for _, e := range env {
			if v, ok := strings.CutPrefix(e, "GIT_CONFIG_COUNT="); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=http.extraHeader", n),
			fmt.Sprintf("GIT_CONFIG_VALUE_%d=Authorization: Basic %s", n, basic),
			fmt.Sprintf("GIT_CONFIG_COUNT=%d", n+1))
	}
	return out, env
}

package gitsub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// Dispatcher starts a runner for a pushed spawn branch. It returns once the
// runner is started (or, for a command that runs it, has run): the result
// comes back on the branch, never through the dispatcher.
type Dispatcher interface {
	Dispatch(ctx context.Context, job Dispatch) error
}

// ErrMaybeDispatched marks a dispatch that failed in a way that may have
// started the runner all the same: the request went out and no answer came
// back (a lost connection, a timeout), or the command was stopped before it
// ended. Any other dispatch error is a refusal: no runner was started.
var ErrMaybeDispatched = errors.New("the runner may have been dispatched")

// Dispatch is what a dispatcher is told.
type Dispatch struct {
	ID     string // the task id
	Branch string // spawn/<id>
	Remote string // the remote the branch was pushed to
}

// Command dispatches by running a shell command line (/bin/sh -c) with the
// task in its environment: AIRLOCK_SPAWN_ID, AIRLOCK_SPAWN_BRANCH and
// AIRLOCK_SPAWN_REMOTE. Its output goes to Stdout and Stderr (discarded
// when nil); a non-zero exit is a refused dispatch, a command stopped
// before it ended (ctx) one that may have happened (ErrMaybeDispatched).
type Command struct {
	Line           string
	Stdout, Stderr io.Writer
}

func (c Command) Dispatch(ctx context.Context, job Dispatch) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.Line)
	cmd.Env = append(os.Environ(),
		"AIRLOCK_SPAWN_ID="+job.ID, "AIRLOCK_SPAWN_BRANCH="+job.Branch, "AIRLOCK_SPAWN_REMOTE="+job.Remote)
	var stderr bytes.Buffer
	cmd.Stdout = c.Stdout
	cmd.Stderr = &stderr
	if c.Stderr != nil {
		cmd.Stderr = io.MultiWriter(c.Stderr, &stderr)
	}
	// A runner the command leaves in the background keeps its output
	// open: the dispatch is over when the command is, give or take this.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay): // exited 0, its output still held
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("dispatch command %q for %s: stopped before it ended (%w): %w", c.Line, job.Branch, context.Cause(ctx), ErrMaybeDispatched)
	default:
		return fmt.Errorf("dispatch command %q for %s: %w: %s", c.Line, job.Branch, err, lastLine(stderr.String()))
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// DefaultGitHubAPI is GitHub's REST API; tests point GitHub.API at a
// loopback server instead.
const DefaultGitHubAPI = "https://api.github.com"

// GitHub dispatches through GitHub Actions' workflow_dispatch: POST
// /repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches with the
// spawn branch as ref and the task id as the input "task". The workflow,
// which must be on the branch (it is, when it is on the remote's base),
// runs the runner script.
type GitHub struct {
	API      string // DefaultGitHubAPI when empty
	Repo     string // owner/name
	Workflow string // the workflow's file name (airlock-spawn.yml) or id
	Token    string
	Client   *http.Client // http.DefaultClient's settings when nil; redirects are never followed
}

func (g GitHub) Dispatch(ctx context.Context, job Dispatch) error {
	owner, name, _ := strings.Cut(g.Repo, "/")
	if !pathSegment(owner) || !pathSegment(name) {
		return fmt.Errorf("GitHub repository %q: want owner/name", g.Repo)
	}
	if !pathSegment(g.Workflow) {
		return fmt.Errorf("GitHub workflow %q: want a file name (airlock-spawn.yml) or an id", g.Workflow)
	}
	if g.Token == "" {
		return fmt.Errorf("GitHub dispatch to %s: no token (AIRLOCK_GITHUB_TOKEN)", g.Repo)
	}
	api := g.API
	if api == "" {
		api = DefaultGitHubAPI
	}
	base, err := url.Parse(api)
	if err != nil {
		return fmt.Errorf("GitHub API URL %q: %w", api, err)
	}
	// The token is a credential: never sent in clear over a network.
	if base.Scheme != "https" && !(base.Scheme == "http" && isLoopback(base.Hostname())) {
		return fmt.Errorf("GitHub API URL %q: want https (plain http only to a loopback address), so the token does not travel in clear", api)
	}
	endpoint := base.JoinPath("repos", owner, name, "actions", "workflows", g.Workflow, "dispatches")
	body, err := json.Marshal(map[string]any{"ref": job.Branch, "inputs": map[string]string{"task": job.ID}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Authorization", "Bearer "+g.Token)
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("Content-Type", "application/json")
	client := http.Client{}
	if g.Client != nil {
		client = *g.Client
	}
	// A redirect is a refused dispatch (GitHub answers 204): followed, it
	// would carry the token wherever it pointed, plain http included.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// A request GitHub may have acted on is one sent whole.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}))
	resp, err := client.Do(req)
	if err != nil {
		if wrote.Load() {
			return fmt.Errorf("GitHub workflow_dispatch %s of %s: sent, and no answer: %w: %w", g.Workflow, g.Repo, err, ErrMaybeDispatched)
		}
		return fmt.Errorf("GitHub workflow_dispatch %s of %s: %w", g.Workflow, g.Repo, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GitHub workflow_dispatch %s of %s for %s: %s: %s", g.Workflow, g.Repo, job.Branch, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// pathSegment says whether s is one plain segment of an API path: it is
// joined into the URL, where "..", "/" or "?" would change what is asked.
func pathSegment(s string) bool {
	return s != "." && s != ".." && githubName.MatchString(s)
}

var githubName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

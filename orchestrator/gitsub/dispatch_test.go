package gitsub

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestGitHubDispatch(t *testing.T) {
	type seen struct {
		method, path, auth, version string
		body                        map[string]any
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"), version: r.Header.Get("X-GitHub-Api-Version")}
		if err := json.NewDecoder(r.Body).Decode(&s.body); err != nil {
			t.Errorf("request body: %v", err)
		}
		got <- s
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	g := GitHub{API: srv.URL, Repo: "acme/agent-state", Workflow: "airlock-spawn.yml", Token: "tok-123"}
	job := Dispatch{ID: "t-1", Branch: Branch("t-1"), Remote: "unused"}
	if err := g.Dispatch(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/repos/acme/agent-state/actions/workflows/airlock-spawn.yml/dispatches" {
		t.Errorf("request = %s %s", s.method, s.path)
	}
	if s.auth != "Bearer tok-123" || s.version == "" {
		t.Errorf("Authorization = %q, X-GitHub-Api-Version = %q", s.auth, s.version)
	}
	if s.body["ref"] != "spawn/t-1" || s.body["inputs"].(map[string]any)["task"] != "t-1" {
		t.Errorf("body = %v, want ref spawn/t-1 and input task t-1", s.body)
	}
}

func TestGitHubDispatchRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"message":"Unexpected inputs provided: [\"task\"]"}`, http.StatusUnprocessableEntity)
	}))
	defer srv.Close()
	ok := GitHub{API: srv.URL, Repo: "acme/state", Workflow: "w.yml", Token: "t"}
	for _, tc := range []struct {
		name string
		g    GitHub
		want string
	}{
		{"the API's refusal", ok, "422"},
		{"no token", GitHub{API: srv.URL, Repo: "acme/state", Workflow: "w.yml"}, "no token"},
		{"a bad repository", GitHub{API: srv.URL, Repo: "acme", Workflow: "w.yml", Token: "t"}, "owner/name"},
		{"a repository that climbs", GitHub{API: srv.URL, Repo: "../..", Workflow: "w.yml", Token: "t"}, "owner/name"},
		{"a workflow that climbs", GitHub{API: srv.URL, Repo: "acme/state", Workflow: "../../../user", Token: "t"}, "want a file name"},
		// the token would cross a network in clear
		{"plain http off loopback", GitHub{API: "http://api.github.test", Repo: "acme/state", Workflow: "w.yml", Token: "t"}, "want https"},
	} {
		err := tc.g.Dispatch(context.Background(), Dispatch{ID: "t-1", Branch: "spawn/t-1"})
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrMaybeDispatched) {
			t.Errorf("%s: Dispatch = %v, want a refusal containing %q", tc.name, err, tc.want)
		}
	}
}

// A redirect, even to the same host, is a refused dispatch: the token
// goes nowhere the API URL did not name, and never over plain http.
func TestGitHubDispatchFollowsNoRedirect(t *testing.T) {
	leaked := make(chan string, 1)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer tlsSrv.Close()
	g := GitHub{API: tlsSrv.URL, Repo: "acme/state", Workflow: "w.yml", Token: "secret-tok", Client: tlsSrv.Client()}
	err := g.Dispatch(context.Background(), Dispatch{ID: "t-1", Branch: "spawn/t-1"})
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("Dispatch = %v; want the redirect refused", err)
	}
	select {
	case auth := <-leaked:
		t.Fatalf("the redirect was followed; the plain http server got Authorization %q", auth)
	default:
	}
}

func TestCommandDispatch(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	c := Command{Line: `printf '%s %s %s' "$AIRLOCK_SPAWN_ID" "$AIRLOCK_SPAWN_BRANCH" "$AIRLOCK_SPAWN_REMOTE" > ` + out}
	if err := c.Dispatch(context.Background(), Dispatch{ID: "t-1", Branch: "spawn/t-1", Remote: "/r.git"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "t-1 spawn/t-1 /r.git" {
		t.Errorf("the command saw %q", b)
	}
	err := Command{Line: "echo no runner here >&2; exit 3"}.Dispatch(context.Background(), Dispatch{ID: "t-1", Branch: "spawn/t-1"})
	if err == nil || !strings.Contains(err.Error(), "no runner here") || errors.Is(err, ErrMaybeDispatched) {
		t.Errorf("failing command: %v, want a refusal with its stderr in the error", err)
	}
	// A runner left in the background holding the command's output:
	// dispatched once the command has ended.
	bg, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	pidFile := filepath.Join(t.TempDir(), "runner.pid")
	if err := (Command{Line: "sleep 300 & echo $! > " + pidFile}).Dispatch(bg, Dispatch{ID: "t-1", Branch: "spawn/t-1"}); err != nil {
		t.Errorf("command leaving a runner behind: %v, want dispatched once the command ended", err)
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// Stopped before it said: it may have started the runner.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = Command{Line: "sleep 30"}.Dispatch(ctx, Dispatch{ID: "t-1", Branch: "spawn/t-1"})
	if !errors.Is(err, ErrMaybeDispatched) {
		t.Errorf("command stopped before it ended: %v, want ErrMaybeDispatched", err)
	}
}

// A dispatch request that went out whole and got no answer may have
// started a workflow; one that never went out did not.
func TestGitHubDispatchUnanswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Reads the whole request, then drops the connection.
	testutil.ServeConns(ln, func(c net.Conn) {
		if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.Copy(io.Discard, req.Body)
		}
	})
	g := GitHub{API: "http://" + ln.Addr().String(), Repo: "acme/state", Workflow: "w.yml", Token: "t"}
	if err := g.Dispatch(context.Background(), Dispatch{ID: "t-1", Branch: "spawn/t-1"}); !errors.Is(err, ErrMaybeDispatched) {
		t.Errorf("sent, no answer: %v, want ErrMaybeDispatched", err)
	}
	ln.Close() // nothing listens now: the request never goes out
	if err := g.Dispatch(context.Background(), Dispatch{ID: "t-1", Branch: "spawn/t-1"}); err == nil || errors.Is(err, ErrMaybeDispatched) {
		t.Errorf("connection refused: %v, want a refusal", err)
	}
}

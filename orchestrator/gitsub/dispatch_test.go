package gitsub

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Dispatch = %v, want an error containing %q", tc.name, err, tc.want)
		}
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
	if err == nil || !strings.Contains(err.Error(), "no runner here") {
		t.Errorf("failing command: %v, want its stderr in the error", err)
	}
}

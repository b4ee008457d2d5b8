package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/gitsub"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/spf13/cobra"
)

// execute runs cmd with args and returns its stdout.
func execute(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// A runner that never committed: poll fails the task with exit code 124
// and tells the inbox; gc then deletes its branch and reports one no
// ledger line knows.
func TestSpawnPollAndGC(t *testing.T) {
	ctx := context.Background()
	remote := testutil.GitRemote(t)
	home := orchestrator.Home{Dir: t.TempDir()}
	b := budget.Budget{Dir: home.Budget(), Daily: 1000}
	id := "20261123-190102-3f9a2c"
	started := time.Now().Add(-time.Hour)
	r, err := b.Reserve(id, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []ledger.Status{ledger.Queued, ledger.Running} {
		if err := ledger.Append(home.Ledger(), ledger.Entry{TS: started, Task: id, Kind: "reviewer", Substrate: kind.Git, Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	never := &gitsub.Substrate{Remote: gitsub.Remote{URL: remote}, Dispatcher: gitsub.Command{Line: "true"}}
	f := &gitsub.Files{Manifest: gitsub.Manifest{ID: id, Kind: "reviewer", Binary: "/bin/true", Preset: "reviewer",
		TimeoutSeconds: 60, Tokens: 100, ReservedDay: r.Day, PolicySHA256: "sha256:" + strings.Repeat("0", 64)}}
	if _, err := never.Start(ctx, home.Subagent(id), f); err != nil {
		t.Fatal(err)
	}
	if _, err := (gitsub.Remote{URL: remote}).Push(ctx, "stray", map[string][]byte{"task": nil}); err != nil {
		t.Fatal(err)
	}

	out, err := execute(t, newSpawnPollCmd(), "--home", home.Dir, "--git-remote", remote, "--git-grace", "1s")
	if err != nil {
		t.Fatalf("spawn poll: %v\n%s", err, out)
	}
	if !strings.Contains(out, id+"\tfailed\texit 124\tthe runner did not commit a result to spawn/"+id+" within 61 s") {
		t.Errorf("spawn poll printed %q", out)
	}
	evs, err := events.Read(home.Inbox(), time.Time{})
	if err != nil || len(evs) != 1 || evs[0].Kind != "spawn_failed" || evs[0].Source != "orchestrator" || !strings.Contains(evs[0].Detail, id) {
		t.Errorf("inbox = %+v, %v; want one spawn_failed naming %s", evs, err, id)
	}

	// A branch of anyone's naming, with an 8-bit CSI in it: printed, it
	// must not reach the terminal raw.
	testutil.Git(t, remote, "update-ref", "refs/heads/spawn/bad\x9b31m", "main")
	out, err = execute(t, newSpawnGCCmd(), "--home", home.Dir, "--git-remote", remote, "--keep-failed", "1ns")
	if err != nil {
		t.Fatalf("spawn gc: %v\n%s", err, out)
	}
	if strings.Contains(out, "\x9b") || !strings.Contains(out, "drift\tspawn/bad") {
		t.Errorf("spawn gc printed %q; want the branch named, without its raw control byte", out)
	}
	for _, want := range []string{"deleted\tspawn/" + id + "\n", "drift\tspawn/stray\tno ledger line: kept\n", "1 deleted, 0 kept, 2 drift"} {
		if !strings.Contains(out, want) {
			t.Errorf("spawn gc printed %q, want %q in it", out, want)
		}
	}
}

func TestSpawnGitUsage(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	t.Setenv(githubTokenEnv, "")
	for _, tc := range []struct {
		cmd  *cobra.Command
		args []string
		want string
	}{
		{newSpawnPollCmd(), []string{"--home", home, "--git-remote", "/r.git", "--git-grace", "0s"}, "want a positive duration"},
		{newSpawnGCCmd(), []string{"--home", home, "--git-remote", "/r.git", "--keep-done", "0s"}, "want positive durations"},
		{newSpawnCmd(), []string{"--home", home, "--kind", "k", "--task-file", "/dev/null", "--git-remote", "/r.git", "--github-repo", "acme/state"}, "no token in AIRLOCK_GITHUB_TOKEN"},
		{newSpawnCmd(), []string{"--home", home, "--kind", "k", "--task-file", "/dev/null", "--git-remote", "/r.git", "--github-repo", "acme/state", "--dispatch-cmd", "true"}, "both given"},
	} {
		_, err := execute(t, tc.cmd, tc.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want a usage error with %q", tc.cmd.Name(), tc.args, err, tc.want)
		}
	}
}

// `airlock spawn --substrate git --github-repo` pushes the branch, then asks
// GitHub (a loopback server here) to run the workflow on it, with the token
// from AIRLOCK_GITHUB_TOKEN; --async returns the task id at once.
func TestSpawnGitHubDispatch(t *testing.T) {
	type dispatched struct {
		path, auth string
		body       struct {
			Ref    string
			Inputs map[string]string
		}
	}
	got := make(chan dispatched, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d dispatched
		d.path, d.auth = r.URL.Path, r.Header.Get("Authorization")
		json.NewDecoder(r.Body).Decode(&d.body)
		got <- d
		w.WriteHeader(http.StatusNoContent)
	}))
	defer api.Close()
	remote := testutil.GitRemote(t)
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "kinds"), 0o755)
	// A kind of the embedded bundle's reviewer preset; the runner, not
	// this host, would run its binary.
	os.WriteFile(filepath.Join(home, "kinds", "quick.yaml"), []byte("name: quick\nbinary: {path: /bin/true}\npreset: reviewer\nsubstrate: git\ntimeout: 1m\ntokens: 10\nprompt: \"{{.Text}}\"\n"), 0o644)
	task := filepath.Join(home, "task.md")
	os.WriteFile(task, []byte("hello"), 0o644)
	t.Setenv(githubTokenEnv, "tok-secret")

	code, out, errs := airlock(t, "", "spawn", "--home", home, "--kind", "quick", "--task-file", task, "--daily-tokens", "100", "--async",
		"--git-remote", remote, "--github-repo", "acme/agent-state", "--github-api", api.URL)
	if code != 0 {
		t.Fatalf("airlock spawn --github-repo = %d %q %s", code, out, errs)
	}
	id := strings.TrimSpace(out)
	d := <-got
	if d.path != "/repos/acme/agent-state/actions/workflows/airlock-spawn.yml/dispatches" || d.auth != "Bearer tok-secret" ||
		d.body.Ref != gitsub.Branch(id) || d.body.Inputs["task"] != id {
		t.Errorf("GitHub was asked %+v; want the workflow on %s with the token", d, gitsub.Branch(id))
	}
	if tip, err := (gitsub.Remote{URL: remote}).Tip(context.Background(), id); err != nil || tip == "" {
		t.Errorf("spawn/%s on the remote: %q, %v", id, tip, err)
	}
}

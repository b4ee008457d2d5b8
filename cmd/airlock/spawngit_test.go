package main

import (
	"bytes"
	"context"
	"errors"
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
	if _, err := b.Reserve(id, 100); err != nil {
		t.Fatal(err)
	}
	for _, st := range []ledger.Status{ledger.Queued, ledger.Running} {
		if err := ledger.Append(home.Ledger(), ledger.Entry{TS: started, Task: id, Kind: "reviewer", Substrate: kind.Git, Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	never := &gitsub.Substrate{Remote: gitsub.Remote{URL: remote}, Dispatcher: gitsub.Command{Line: "true"}}
	f := &gitsub.Files{Manifest: gitsub.Manifest{ID: id, Kind: "reviewer", Binary: "/bin/true", Preset: "reviewer",
		TimeoutSeconds: 60, Tokens: 100, PolicySHA256: "sha256:" + strings.Repeat("0", 64)}}
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

	out, err = execute(t, newSpawnGCCmd(), "--home", home.Dir, "--git-remote", remote, "--keep-failed", "1ns")
	if err != nil {
		t.Fatalf("spawn gc: %v\n%s", err, out)
	}
	for _, want := range []string{"deleted\tspawn/" + id + "\n", "drift\tspawn/stray\tno ledger line: kept\n", "1 deleted, 0 kept, 1 drift"} {
		if !strings.Contains(out, want) {
			t.Errorf("spawn gc printed %q, want %q in it", out, want)
		}
	}
}

func TestSpawnGitUsage(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	for _, tc := range []struct {
		cmd  *cobra.Command
		args []string
		want string
	}{
		{newSpawnPollCmd(), []string{"--home", home}, "needs --git-remote"},
		{newSpawnGCCmd(), []string{"--home", home, "--git-remote", "/r.git", "--keep-done", "0s"}, "want positive durations"},
	} {
		_, err := execute(t, tc.cmd, tc.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want a usage error with %q", tc.cmd.Name(), tc.args, err, tc.want)
		}
	}
}

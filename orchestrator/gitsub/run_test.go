package gitsub

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// job is what the spawn flow hands a substrate: the task rendered in its
// directory, the kind, the verified bundle's hash.
func job(t *testing.T, id string, async bool) spawn.Job {
	t.Helper()
	dir := filepath.Join(t.TempDir(), id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"prompt.txt": "review this\n", "task": "the task\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"{\\\"read\\\":\\\"$(cat \"$1\")\\\"}\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	k := &kind.Kind{Name: "reviewer", Binary: bin, Args: []string{"{{.PromptFile}}", "--dir={{.Dir}}"}, Preset: "reviewer",
		Substrate: kind.Git, Timeout: 90 * time.Second, Tokens: 10, Source: []byte("name: reviewer\n")}
	return spawn.Job{ID: id, Kind: k, Dir: dir, Policy: testPin, Async: async}
}

// An async run hands the task over once its branch is pushed, with the
// arguments rendered for the runner's checkout; a sync run waits for the
// runner's result and keeps the task claimed past its return, for the
// spawn's terminal ledger line.
func TestRun(t *testing.T) {
	ctx := context.Background()
	remote := Remote{URL: testutil.GitRemote(t)}

	async := job(t, "t-async", true)
	s := &Substrate{Remote: remote, Dispatcher: Command{Line: "true"}}
	r, err := s.Run(ctx, async)
	if err != nil || r.Status != ledger.Running {
		t.Fatalf("async Run = %+v, %v; want running", r, err)
	}
	f, err := remote.Fetch(ctx, "t-async", "manifest.json", "prompt.txt")
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(f.Files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	if want := []string{"spawns/t-async/prompt.txt", "--dir=spawns/t-async/work"}; !slices.Equal(m.Args, want) || m.TimeoutSeconds != 90 || m.PolicySHA256 != testPin {
		t.Errorf("manifest = %+v, want args %q, 90 s, the pin", m, want)
	}
	if string(f.Files["prompt.txt"]) != "review this\n" {
		t.Errorf("prompt.txt on the branch = %q", f.Files["prompt.txt"])
	}
	release, err := Claim(async.Dir)
	if err != nil {
		t.Errorf("an async task stays claimed: %v", err)
	} else {
		release()
	}

	sync := job(t, "t-sync", false)
	s = &Substrate{Remote: remote, Dispatcher: runnerDispatch(t), PollEvery: 50 * time.Millisecond}
	r, err = s.Run(ctx, sync)
	var read struct{ Read string }
	if err != nil || r.Status != ledger.Done || json.Unmarshal(r.Result, &read) != nil || read.Read != "review this" {
		t.Fatalf("sync Run = %+v (result %s), %v; want done, the prompt read", r, r.Result, err)
	}
	runtime.GC() // a claim nothing refers to would be closed by now
	if _, err := Claim(sync.Dir); !errors.Is(err, ErrClaimed) {
		t.Errorf("Claim after a sync Run = %v, want ErrClaimed", err)
	}
}

// A sync spawn stopped while it waits (^C) hands the task over: its runner
// carries on, so it is still running, for Poll to settle.
func TestRunStoppedHandsOver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	j := job(t, "t-stopped", false)
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, PollEvery: 10 * time.Millisecond,
		Dispatcher: dispatchFunc(func(context.Context, Dispatch) error { cancel(); return nil })}
	r, err := s.Run(ctx, j)
	if err != nil || r.Status != ledger.Running {
		t.Errorf("Run stopped while waiting = %+v, %v; want running, handed over", r, err)
	}
}

// dispatchFunc is a Dispatcher that calls itself.
type dispatchFunc func(context.Context, Dispatch) error

func (f dispatchFunc) Dispatch(ctx context.Context, d Dispatch) error { return f(ctx, d) }

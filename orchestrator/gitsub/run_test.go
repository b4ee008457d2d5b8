package gitsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"golang.org/x/sys/unix"
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
	release, err := spawn.Claim(async.Dir)
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
	if _, err := spawn.Claim(sync.Dir); !errors.Is(err, spawn.ErrClaimed) {
		t.Errorf("Claim after a sync Run = %v, want spawn.ErrClaimed", err)
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

// flakyGit is a git for Remote.Git whose calls on the remote (ls-remote,
// fetch) fail as an unreachable remote's do while the file it returns
// holds a positive count, one call per count; it is git otherwise.
func flakyGit(t *testing.T) (bin, count string) {
	t.Helper()
	dir := t.TempDir()
	bin, count = filepath.Join(dir, "git"), filepath.Join(dir, "fails")
	script := `#!/bin/sh
n=$(cat ` + count + ` 2>/dev/null || echo 0)
if [ "$n" -gt 0 ] && { [ "$1" = ls-remote ] || [ "$1" = fetch ]; }; then
	echo $((n - 1)) >` + count + `
	echo "fatal: unable to access the remote: Could not resolve host" >&2
	exit 128
fi
exec git "$@"
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, count
}

// A sync spawn whose remote fails for a while as it waits keeps waiting:
// the runner's result is collected once the remote answers again. One that
// never answers again hands the task over, running, for Poll: the runner
// may well have delivered.
func TestRunRemoteErrors(t *testing.T) {
	ctx := context.Background()
	bin, count := flakyGit(t)
	remote := Remote{URL: testutil.GitRemote(t), Git: bin}
	runner := runnerDispatch(t)
	// The runner runs (with the real git), then the remote fails the
	// spawn's next three calls.
	failAfterRun := func(fails string) Dispatcher {
		return dispatchFunc(func(ctx context.Context, d Dispatch) error {
			if err := runner.Dispatch(ctx, d); err != nil {
				return err
			}
			return os.WriteFile(count, []byte(fails), 0o644)
		})
	}

	s := &Substrate{Remote: remote, Dispatcher: failAfterRun("3"), PollEvery: 10 * time.Millisecond}
	r, err := s.Run(ctx, job(t, "t-flaky", false))
	if err != nil || r.Status != ledger.Done {
		t.Fatalf("Run with a remote failing three times = %+v, %v; want done", r, err)
	}
	if b, _ := os.ReadFile(count); string(b) != "0\n" {
		t.Fatalf("the remote failed %q more times: the wait did not go through the failures", b)
	}

	j := job(t, "t-unreachable", false)
	j.Kind.Timeout = time.Second
	s = &Substrate{Remote: remote, Dispatcher: failAfterRun("1000000"), PollEvery: 10 * time.Millisecond, Grace: time.Millisecond}
	r, err = s.Run(ctx, j)
	if err != nil || r.Status != ledger.Running || !strings.Contains(r.Detail, "Could not resolve host") {
		t.Errorf("Run with a remote failing past the deadline = %+v, %v; want running, handed over, naming the error", r, err)
	}
	if _, err := os.Stat(filepath.Join(j.Dir, "result.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a result was written for a task nothing is known of: %v", err)
	}
}

// A Poll that claimed a task between its running line and Run (it finds
// nothing pushed and lets go) does not fail the spawn: Run waits for the
// claim, then starts the task.
func TestRunWaitsForClaim(t *testing.T) {
	j := job(t, "t-claimed", true)
	release, err := spawn.Claim(j.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(j.Dir, ".claim"), &st); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		r   spawn.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Dispatcher: Command{Line: "true"}}
		r, err := s.Run(context.Background(), j)
		done <- outcome{r, err}
	}()
	// /proc/locks lists a waiter as "N: -> FLOCK ... <maj>:<min>:<inode>".
	waiting := fmt.Sprintf(":%d ", st.Ino)
	testutil.WaitFor(t, "Run to wait for the claim", func() bool {
		select {
		case o := <-done:
			done <- o
			return true // it did not wait: the check below says how it ended
		default:
		}
		locks, _ := os.ReadFile("/proc/locks")
		for _, l := range strings.Split(string(locks), "\n") {
			if strings.Contains(l, "->") && strings.Contains(l+" ", waiting) {
				return true
			}
		}
		return false
	})
	release()
	if o := <-done; o.err != nil || o.r.Status != ledger.Running {
		t.Errorf("Run while a poll held the claim = %+v, %v; want it started, running", o.r, o.err)
	}
}

// A dispatch that may have started the runner hands the task over to Poll,
// sync or async, as one that did would be: failed, it would be charged
// nothing. A dispatch refused fails the run.
func TestRunHandsOverAnUnknownDispatch(t *testing.T) {
	remote := Remote{URL: testutil.GitRemote(t)}
	for _, async := range []bool{false, true} {
		s := &Substrate{Remote: remote, Dispatcher: dispatchFunc(func(context.Context, Dispatch) error {
			return fmt.Errorf("no answer: %w", ErrMaybeDispatched)
		})}
		r, err := s.Run(context.Background(), job(t, fmt.Sprintf("t-unknown-%v", async), async))
		if err != nil || r.Status != ledger.Running || !strings.Contains(r.Detail, "no answer") {
			t.Errorf("async %v: Run after a dispatch of unknown outcome = %+v, %v; want running, handed over, saying why", async, r, err)
		}
	}
	s := &Substrate{Remote: remote, Dispatcher: Command{Line: "exit 3"}}
	if r, err := s.Run(context.Background(), job(t, "t-refused", false)); err == nil {
		t.Errorf("Run after a refused dispatch = %+v; want an error", r)
	}
}

// A sync wait that fails once the runner was dispatched (here its branch
// is deleted under it) hands the task over to Poll instead of failing it:
// the runner may be running, and a failed task would be charged nothing.
func TestRunHandsOverAFailedWait(t *testing.T) {
	remote := Remote{URL: testutil.GitRemote(t)}
	deleteBranch := dispatchFunc(func(_ context.Context, d Dispatch) error {
		testutil.Git(t, "", "--git-dir", remote.URL, "branch", "-D", d.Branch)
		return nil
	})
	s := &Substrate{Remote: remote, Dispatcher: deleteBranch, PollEvery: 10 * time.Millisecond}
	r, err := s.Run(context.Background(), job(t, "t-lost-branch", false))
	if err != nil || r.Status != ledger.Running || !strings.Contains(r.Detail, "is gone") {
		t.Errorf("Run whose branch went away = %+v, %v; want running, handed over, naming it", r, err)
	}
}

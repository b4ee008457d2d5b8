package gitsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// Defaults of Substrate: the original design's poll interval, and how long
// past the kind's timeout a runner may take to start and commit.
const (
	DefaultPollEvery = 10 * time.Second
	DefaultGrace     = 600 * time.Second
)

// Substrate runs spawns on branches of Remote, started by Dispatcher. It is
// the spawn flow's "git" substrate (spawn.AsyncSubstrate).
type Substrate struct {
	Remote     Remote
	Dispatcher Dispatcher
	PollEvery  time.Duration    // DefaultPollEvery when zero
	Grace      time.Duration    // DefaultGrace when zero
	Now        func() time.Time // time.Now when nil
}

// Async: a git spawn can be handed over; Poll settles it.
func (s *Substrate) Async() bool { return true }

// errRemote marks a failure to reach the remote while a task runs: it may
// pass, so Wait tries again at its next poll.
var errRemote = errors.New("the remote did not answer")

// Run pushes the job as spawn/<id> and dispatches a runner. An async job
// is then handed over (status running; Poll settles it). A sync job waits
// for the runner's result, and holds the task's Claim until this process
// exits, past the spawn's terminal ledger line, so that a Poll running
// meanwhile never settles it too; stopped while it waits (ctx), or failing
// to wait (the remote unreachable up to the deadline, the branch gone), it
// is handed over as an async job is: the runner carries on regardless.
//
// Run waits for the claim (a Poll that took it between the spawn's running
// line and this call holds it for one reconcile, and finds nothing pushed
// to settle): the task is this process's to start.
func (s *Substrate) Run(ctx context.Context, j spawn.Job) (spawn.Result, error) {
	prompt, err := os.ReadFile(filepath.Join(j.Dir, "prompt.txt"))
	if err != nil {
		return spawn.Result{}, err
	}
	task, err := os.ReadFile(filepath.Join(j.Dir, "task"))
	if err != nil {
		return spawn.Result{}, err
	}
	f, err := NewFiles(j.Kind, j.ID, prompt, task, j.Policy)
	if err != nil {
		return spawn.Result{}, err
	}
	f.Manifest.ReservedDay = j.Reserved
	release, err := spawn.ClaimWait(j.Dir, true)
	if err != nil {
		return spawn.Result{}, err
	}
	started := s.now()
	// A runner that may be running is spending: failed here, its task
	// would be charged nothing. Poll settles it from its branch, or gives
	// up on it at its deadline charging the estimate.
	handOver := func(why string) spawn.Result {
		return spawn.Result{Status: ledger.Running, Started: started, Detail: "handed over to airlock spawn poll: " + why}
	}
	pushed, err := s.Start(ctx, j.Dir, f)
	if err != nil {
		release()
		if errors.Is(err, ErrMaybeDispatched) {
			return handOver(err.Error()), nil
		}
		return spawn.Result{}, err
	}
	if j.Async {
		release()
		return spawn.Result{Status: ledger.Running, Started: started}, nil
	}
	keepUntilExit(release)
	r, err := s.Wait(ctx, j.Dir, &f.Manifest, pushed, started)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopped while waiting: the runner carries on regardless.
		return handOver("stopped waiting"), nil
	case err != nil:
		// Pushed and dispatched: whatever went wrong here (the remote
		// unreachable, the branch gone, the result not written here),
		// the runner may be running.
		return handOver(err.Error()), nil
	}
	return r, nil
}

func (s *Substrate) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Substrate) grace() time.Duration {
	if s.Grace > 0 {
		return s.Grace
	}
	return DefaultGrace
}

// Deadline is when a runner that has committed no result is given up on.
func (s *Substrate) Deadline(m *Manifest, started time.Time) time.Time {
	return started.Add(m.Timeout() + s.grace())
}

// Start records the manifest in dir (the local spawn directory, where the
// spawn flow rendered the rest), pushes the spawn's files as spawn/<id> and
// dispatches a runner for it. It returns the commit pushed. A failed
// dispatch leaves the branch, which GC reclaims.
func (s *Substrate) Start(ctx context.Context, dir string, f *Files) (string, error) {
	files, err := f.encode()
	if err != nil {
		return "", err
	}
	if s.Dispatcher == nil {
		return "", fmt.Errorf("git substrate: no dispatcher configured (--dispatch-cmd, or --github-repo with AIRLOCK_GITHUB_TOKEN)")
	}
	if err := writeFiles(dir, map[string][]byte{"manifest.json": files["manifest.json"]}); err != nil {
		return "", err
	}
	id := f.Manifest.ID
	commit, err := s.Remote.Push(ctx, id, files)
	if err != nil {
		return "", err
	}
	if err := s.Dispatcher.Dispatch(ctx, Dispatch{ID: id, Branch: Branch(id), Remote: s.Remote.URL}); err != nil {
		return commit, err
	}
	return commit, nil
}

// Wait polls spawn/<id> every PollEvery until the runner's result appears
// on it (the branch moves past pushed, the commit Start made), copies it
// into dir and returns it. Once Deadline passes with no result it writes
// and returns a failed result with exit code 124 instead. A remote that
// does not answer is asked again at the next poll; one that still did not
// at the deadline is an error wrapping errRemote (nothing is known of the
// runner: it is not given up on).
func (s *Substrate) Wait(ctx context.Context, dir string, m *Manifest, pushed string, started time.Time) (spawn.Result, error) {
	every := s.PollEvery
	if every <= 0 {
		every = DefaultPollEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		tip, err := s.Remote.Tip(ctx, m.ID)
		switch {
		case err != nil:
			err = fmt.Errorf("%w: %w", errRemote, err)
		case tip == "":
			return spawn.Result{}, fmt.Errorf("branch %s is gone from %s while its task runs", Branch(m.ID), s.Remote)
		case tip != pushed:
			var r spawn.Result
			var found bool
			r, found, _, err = s.collect(ctx, dir, m.ID, m.Kind)
			if found || (err != nil && !errors.Is(err, errRemote)) {
				return r, err
			}
		}
		if now := s.now(); now.After(s.Deadline(m, started)) {
			if err != nil {
				return spawn.Result{}, fmt.Errorf("waiting for %s until its deadline: %w", Branch(m.ID), err)
			}
			return s.giveUp(dir, m, started, now)
		}
		select {
		case <-ctx.Done():
			return spawn.Result{}, fmt.Errorf("waiting for %s: %w", Branch(m.ID), ctx.Err())
		case <-tick.C:
		}
	}
}

// collect fetches the branch and, when the runner's result.json is on it,
// writes the returned files into dir and returns the result (found). It
// returns the manifest on the branch either way (nil when it has none).
func (s *Substrate) collect(ctx context.Context, dir, id, kind string) (r spawn.Result, found bool, m *Manifest, err error) {
	f, err := s.Remote.Fetch(ctx, id, append([]string{"manifest.json"}, Returned...)...)
	if err != nil {
		return r, false, nil, fmt.Errorf("%w: %w", errRemote, err)
	}
	if b, ok := f.Files["manifest.json"]; ok {
		m = new(Manifest)
		if json.Unmarshal(b, m) != nil {
			m = nil
		}
	}
	raw, ok := f.Files["result.json"]
	if !ok {
		return r, false, m, nil
	}
	r = parseResult(id, kind, raw)
	files := map[string][]byte{}
	for _, name := range Returned {
		if b, ok := f.Files[name]; ok && name != spawn.ResultFile {
			files[name] = b
		}
	}
	if err := writeFiles(dir, files); err != nil {
		return r, true, m, err
	}
	// What is kept locally is what was judged: an unusable result is
	// replaced by the failure that says why.
	return r, true, m, spawn.WriteResult(dir, r)
}

// giveUp writes and returns the result of a runner that committed nothing
// in time.
func (s *Substrate) giveUp(dir string, m *Manifest, started, now time.Time) (spawn.Result, error) {
	r := timedOut(m.ID, m.Kind, started, now, m.Timeout()+s.grace())
	return r, spawn.WriteResult(dir, r)
}

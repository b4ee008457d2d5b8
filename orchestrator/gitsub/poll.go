package gitsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// Poll reconciles every task the ledger at home has running on the git
// substrate: when its branch carries the runner's result, the returned
// files are copied into the task's directory, the ledger gets the task's
// terminal line and its reservation is settled (at the usage reported,
// else the estimate); when Deadline has passed with no result (or with the
// branch gone), the task fails with exit code 124. A task claimed by a
// process still waiting for it is left alone. Errors of single tasks are
// joined; the others are still reconciled.
func (s *Substrate) Poll(ctx context.Context, home orchestrator.Home, b budget.Budget) ([]spawn.Reconciled, error) {
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		return nil, err
	}
	var running []string
	for _, t := range ledger.Fold(entries) {
		if t.Status == ledger.Running && t.Substrate == kind.Git {
			running = append(running, t.ID)
		}
	}
	if len(running) == 0 {
		return nil, nil
	}
	// One listing of the remote for all: a branch is fetched only when
	// it exists.
	tips, err := s.Remote.Branches(ctx)
	if err != nil {
		return nil, err
	}
	var done []spawn.Reconciled
	var errs []error
	for _, id := range running {
		r, err := s.reconcile(ctx, home, b, id, tips[id] != "")
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", id, err))
		}
		if r != nil {
			done = append(done, *r)
		}
	}
	return done, errors.Join(errs...)
}

// reconcile settles task id if its result is on its branch (onRemote:
// the branch exists) or its deadline has passed.
func (s *Substrate) reconcile(ctx context.Context, home orchestrator.Home, b budget.Budget, id string, onRemote bool) (*spawn.Reconciled, error) {
	dir := home.Subagent(id)
	t, release, err := spawn.ClaimIn(home, id, ledger.Running)
	if t == nil || err != nil {
		return nil, err
	}
	defer release()
	started := t.Started
	if started.IsZero() {
		started = t.Queued
	}
	m, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	var r spawn.Result
	found := false
	if onRemote {
		var onBranch *Manifest
		if r, found, onBranch, err = s.collect(ctx, dir, id, t.Kind); err != nil {
			return nil, err
		}
		if m == nil {
			m = onBranch
		}
	}
	if m == nil && !found {
		return s.neverPushed(home, b, t, dir, started)
	}
	if !found {
		now := s.now()
		if !now.After(s.Deadline(m, started)) {
			return nil, nil
		}
		if r, err = s.giveUp(dir, m, started, now); err != nil {
			return nil, err
		}
	}
	var used int64
	var day string
	if m != nil {
		used, day = m.Tokens, m.ReservedDay
	}
	if r.Usage != nil {
		used = r.Usage.Tokens
	}
	return s.settle(home, b, t, day, r, used)
}

// neverPushed settles a task with no manifest, here or on its branch: its
// spawn stopped before it pushed the task (Start records the manifest
// first), so nothing runs it. Not before the grace has passed since it
// started, though: its spawn may be just about to take the claim this Poll
// holds, and start it.
func (s *Substrate) neverPushed(home orchestrator.Home, b budget.Budget, t *ledger.Task, dir string, started time.Time) (*spawn.Reconciled, error) {
	// A spawn still alive may be just about to push it however long it
	// has been (stopped meanwhile: ^Z, a host asleep): failed and its
	// tokens released now, the task would run on with nothing reserved.
	if t.Spawner != nil {
		if alive, err := t.Spawner.Alive(); alive || err != nil {
			return nil, err
		}
	}
	now := s.now()
	if !now.After(started.Add(s.grace())) {
		return nil, nil
	}
	r := spawn.Result{Task: t.ID, Kind: t.Kind, Substrate: kind.Git, Status: ledger.Failed, Exit: 1, Started: started, Ended: now,
		Detail: fmt.Sprintf("no manifest.json in %s nor on %s: the spawn stopped before it pushed the task, and nothing runs it", dir, Branch(t.ID))}
	if err := spawn.WriteResult(dir, r); err != nil {
		return nil, err
	}
	return s.settle(home, b, t, "", r, 0)
}

// settle ends task t with r in the ledger, then settles its reservation at
// used, on day (the day the manifest recorded; else, or when that is not a
// date, which a branch's manifest may say, the day its running line
// recorded; else the day of the queued line).
func (s *Substrate) settle(home orchestrator.Home, b budget.Budget, t *ledger.Task, day string, r spawn.Result, used int64) (*spawn.Reconciled, error) {
	exit := r.Exit
	if err := ledger.Append(home.Ledger(), ledger.Entry{Task: t.ID, Kind: t.Kind, Substrate: kind.Git,
		Status: r.Status, Exit: &exit, Usage: r.Usage, Detail: r.Detail}); err != nil {
		return nil, err
	}
	// The ledger first: a settle that fails leaves tokens reserved (the
	// budget errs toward refusing), never a task settled twice.
	rc := &spawn.Reconciled{ID: t.ID, Status: r.Status, Exit: exit, Detail: r.Detail}
	queued := t.Queued
	if queued.IsZero() {
		queued = t.Started
	}
	day = firstDate(day, t.Reserved, orchestrator.Today(queued))
	if err := b.Settle(budget.Reservation{Task: t.ID, Day: day}, used); err != nil {
		return rc, err
	}
	return rc, nil
}

// firstDate is the first of days that is a date (YYYY-MM-DD); the last
// when none is.
func firstDate(days ...string) string {
	for _, d := range days {
		if _, err := time.Parse(time.DateOnly, d); err == nil {
			return d
		}
	}
	return days[len(days)-1]
}

// readManifest reads the manifest Start recorded in dir; nil when there is
// none (the directory was lost: the branch's is used).
func readManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	return &m, nil
}

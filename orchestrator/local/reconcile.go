package local

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// ExitSpawnerGone is the exit code of a local task whose `airlock spawn`
// died before recording its end: 1, airlock's "could not carry it out".
// The sub-agent's own code is unknown (its sandbox was killed with its
// spawner, by the init's parent-death signal or the pod's life line), and
// no code of its own (137, 124) may be claimed for it.
const ExitSpawnerGone = 1

// Reconcile ends every task the ledger at home has running on the local
// substrate whose spawner (the process its running line names) is gone:
// the sandbox died with it, so the task will never end otherwise. A
// result.json the spawner wrote before dying is its outcome; else the task
// failed with ExitSpawnerGone and a detail starting "spawner gone". Its
// reservation is then settled at the usage reported, else at the estimate
// it holds (the tokens may have been spent). So too a task still queued,
// on any substrate, whose spawner is gone: nothing ran, its reservation is
// released. A line that names no process (an older airlock's) is left
// alone: nothing says it is gone. Errors of single tasks are joined; the
// others are still reconciled.
func Reconcile(home orchestrator.Home, b budget.Budget, now func() time.Time) ([]spawn.Reconciled, error) {
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		return nil, err
	}
	var done []spawn.Reconciled
	var errs []error
	for _, t := range ledger.Fold(entries) {
		if t.Spawner == nil || t.Status != ledger.Queued && (t.Status != ledger.Running || t.Substrate != kind.Local) {
			continue
		}
		r, err := reconcile(home, b, t, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", t.ID, err))
		}
		if r != nil {
			done = append(done, *r)
		}
	}
	return done, errors.Join(errs...)
}

// reconcile ends task t if its spawner is gone, under the task's claim
// (two polls never settle it twice). Running, its result is the one its
// spawner wrote, else a spawner-gone failure, and its reservation is
// settled at the usage reported, else at what it holds. Queued, nothing
// ran: a spawner-gone failure, the reservation released.
func reconcile(home orchestrator.Home, b budget.Budget, t ledger.Task, now func() time.Time) (*spawn.Reconciled, error) {
	if alive, err := t.Spawner.Alive(); alive || err != nil {
		return nil, err
	}
	id := t.ID
	dir := home.Subagent(id)
	still, release, err := spawn.ClaimIn(home, id, t.Status)
	if still == nil || err != nil {
		return nil, err
	}
	defer release()
	r, err := spawn.ReadResult(dir)
	if t.Status == ledger.Queued || err != nil || !ledger.Terminal(r.Status) {
		r = spawn.Result{Task: id, Kind: t.Kind, Substrate: t.Substrate, Status: ledger.Failed, Exit: ExitSpawnerGone,
			Started: t.Started, Ended: now().UTC(),
			Detail: fmt.Sprintf("spawner gone: airlock spawn (pid %d) ended before its task and recorded no end; its sandbox went with it, and the sub-agent's own exit code is unknown", t.Spawner.Pid)}
		if t.Status == ledger.Queued {
			r.Detail = fmt.Sprintf("spawner gone before the task ran: airlock spawn (pid %d) ended before starting it; nothing ran, and what it reserved is released", t.Spawner.Pid)
		}
		if err := spawn.WriteResult(dir, r); err != nil {
			return nil, err
		}
	}
	exit := r.Exit
	if err := ledger.Append(home.Ledger(), ledger.Entry{Task: id, Kind: t.Kind, Substrate: t.Substrate,
		Status: r.Status, Exit: &exit, Usage: r.Usage, Detail: r.Detail}); err != nil {
		return nil, err
	}
	// The ledger first: a settle that fails leaves tokens reserved (the
	// budget errs toward refusing), never a task settled twice.
	rc := &spawn.Reconciled{ID: id, Status: r.Status, Exit: exit, Detail: r.Detail}
	resv := budget.Reservation{Task: id, Day: t.Reserved}
	switch {
	case t.Status == ledger.Queued:
		// It may have died before it reserved: nothing to release then.
		if err := b.Settle(resv, 0); err != nil && !errors.Is(err, budget.ErrNoReservation) {
			return rc, err
		}
		return rc, nil
	case r.Usage != nil:
		return rc, b.Settle(resv, r.Usage.Tokens)
	}
	return rc, b.SettleHeld(resv)
}

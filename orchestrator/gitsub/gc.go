package gitsub

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

// Retention is how long a finished task's branch is kept after its end:
// successes as a recent audit trail, failures longer, for the postmortem.
type Retention struct {
	Done   time.Duration // DefaultRetention.Done when zero
	Failed time.Duration // failed, timeout and refused; DefaultRetention.Failed when zero
}

// DefaultRetention keeps done branches 7 days and failed ones 30.
var DefaultRetention = Retention{Done: 7 * 24 * time.Hour, Failed: 30 * 24 * time.Hour}

// GCReport is what GC did with each spawn branch.
type GCReport struct {
	Deleted []string // task ids whose branch was deleted
	Kept    []string // in flight, or finished within retention
	Drift   []string // a branch no ledger line knows: kept, for the operator to look at
}

// GC deletes the spawn branches of tasks that ended (per the ledger's
// tasks) longer ago than their retention: done after Retention.Done,
// failed or timed out after Retention.Failed. Queued and running tasks'
// branches are kept, and so are branches with no ledger line (drift: a
// wiped ledger, another orchestrator sharing the remote); nothing is
// deleted on a guess. A branch that moves while GC runs is kept.
func (rm Remote) GC(ctx context.Context, tasks []ledger.Task, now time.Time, keep Retention) (GCReport, error) {
	if keep.Done <= 0 {
		keep.Done = DefaultRetention.Done
	}
	if keep.Failed <= 0 {
		keep.Failed = DefaultRetention.Failed
	}
	var rep GCReport
	tips, err := rm.Branches(ctx)
	if err != nil {
		return rep, err
	}
	byID := map[string]ledger.Task{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	ids := make([]string, 0, len(tips))
	for id := range tips {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var errs []error
	for _, id := range ids {
		t, known := byID[id]
		switch {
		case !known:
			rep.Drift = append(rep.Drift, id)
			continue
		case !expired(t, now, keep):
			rep.Kept = append(rep.Kept, id)
			continue
		}
		if err := rm.Delete(ctx, id, tips[id]); err != nil {
			errs = append(errs, err)
			rep.Kept = append(rep.Kept, id)
			continue
		}
		rep.Deleted = append(rep.Deleted, id)
	}
	return rep, errors.Join(errs...)
}

// expired says whether task t's branch is past its retention at now.
func expired(t ledger.Task, now time.Time, keep Retention) bool {
	if !ledger.Terminal(t.Status) || t.Ended.IsZero() {
		return false
	}
	ttl := keep.Failed
	if t.Status == ledger.Done {
		ttl = keep.Done
	}
	return now.Sub(t.Ended) > ttl
}

func (r GCReport) String() string {
	return fmt.Sprintf("%d deleted, %d kept, %d drift", len(r.Deleted), len(r.Kept), len(r.Drift))
}

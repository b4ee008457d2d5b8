package gitsub

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

func TestGC(t *testing.T) {
	ctx := context.Background()
	rm := Remote{URL: testutil.GitRemote(t)}
	now := time.Date(2026, 11, 23, 2, 30, 0, 0, time.UTC)
	day := 24 * time.Hour
	ended := func(id string, st ledger.Status, ago time.Duration) ledger.Task {
		return ledger.Task{ID: id, Substrate: "git", Status: st, Queued: now.Add(-ago - time.Hour), Started: now.Add(-ago - time.Hour), Ended: now.Add(-ago)}
	}
	tasks := []ledger.Task{
		ended("done-old", ledger.Done, 8*day),
		ended("done-new", ledger.Done, 6*day),
		ended("failed-mid", ledger.Failed, 8*day), // a failure is kept 30 days
		ended("failed-old", ledger.Failed, 31*day),
		ended("timeout-old", ledger.Timeout, 31*day),
		{ID: "running-old", Substrate: "git", Status: ledger.Running, Queued: now.Add(-90 * day), Started: now.Add(-90 * day)},
		{ID: "queued-old", Substrate: "git", Status: ledger.Queued, Queued: now.Add(-90 * day)},
	}
	for _, task := range append(slices.Clone(tasks), ledger.Task{ID: "drift"}) {
		if _, err := rm.Push(ctx, task.ID, map[string][]byte{"task": []byte(task.ID)}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := rm.GC(ctx, tasks, now, Retention{})
	if err != nil {
		t.Fatal(err)
	}
	want := GCReport{
		Deleted: []string{"done-old", "failed-old", "timeout-old"},
		Kept:    []string{"done-new", "failed-mid", "queued-old", "running-old"},
		Drift:   []string{"drift"},
	}
	if !slices.Equal(rep.Deleted, want.Deleted) || !slices.Equal(rep.Kept, want.Kept) || !slices.Equal(rep.Drift, want.Drift) {
		t.Errorf("GC = %+v\nwant %+v", rep, want)
	}
	left, err := rm.Branches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range want.Deleted {
		if _, ok := left[id]; ok {
			t.Errorf("spawn/%s still on the remote", id)
		}
	}
	if len(left) != len(want.Kept)+len(want.Drift) {
		t.Errorf("branches left: %v", left)
	}
}

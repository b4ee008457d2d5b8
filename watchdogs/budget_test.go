package watchdogs

import (
	"slices"
	"testing"
	"time"
)

// Restarts older than the window leave it, and so do those recorded after
// now (the clock was stepped back since): neither holds the budget shut.
func TestBudgetPrune(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b := Budget{Max: 3, Window: 30 * time.Minute}
	recent := now.Add(-10 * time.Minute)
	got := b.prune([]time.Time{now.Add(-2 * time.Hour), recent, now.Add(23 * time.Hour), now.Add(time.Second)}, now)
	if !slices.Equal(got, []time.Time{recent}) {
		t.Fatalf("prune = %v; want only %v", got, recent)
	}
}

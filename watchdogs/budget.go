package watchdogs

import "time"

// Budget bounds recoveries: at most Max in any Window. Past it a watchdog
// gives up instead of looping: restarting something that dies at once only
// hides the cause and burns the host.
type Budget struct {
	Max    int
	Window time.Duration
}

// Default budget: three restarts in thirty minutes, as issue 14 asks.
const (
	DefaultMaxRestarts = 3
	DefaultWindow      = 30 * time.Minute
)

// prune drops the restarts that have left the window at now, and those
// recorded after now: a clock stepped back (an RTC that ran ahead, then
// NTP's first sync) must not hold the budget shut for the step's length.
func (b Budget) prune(restarts []time.Time, now time.Time) []time.Time {
	kept := restarts[:0]
	for _, t := range restarts {
		if age := now.Sub(t); age >= 0 && age < b.Window {
			kept = append(kept, t)
		}
	}
	return kept
}

// allows reports whether one more restart fits, given the restarts still
// in the window (pruned), and if not, when a slot frees.
func (b Budget) allows(restarts []time.Time) (ok bool, until time.Time) {
	if len(restarts) < b.Max {
		return true, time.Time{}
	}
	return false, restarts[len(restarts)-b.Max].Add(b.Window)
}

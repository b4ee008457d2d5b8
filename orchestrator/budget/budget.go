// Package budget is the orchestrator's daily token budget: every spawn
// reserves its kind's estimate before anything runs, and settles it with
// what the sub-agent actually used.
//
// One file per UTC day, budget/<YYYY-MM-DD>.json, read, changed and
// written whole (temp file, fsync, rename) under an exclusive flock on
// <YYYY-MM-DD>.lock beside it, so concurrent spawns (goroutines or
// processes) never overspend and a crash leaves the old or the new file,
// never half of one.
package budget

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrExhausted: the day's budget cannot hold the reservation.
var ErrExhausted = errors.New("daily token budget exhausted")

// ErrNoReservation: the day holds no reservation of the task (settled
// already, or never made).
var ErrNoReservation = errors.New("holds no reservation")

// ErrUnusable: the day's budget file cannot be believed (it does not
// parse, or holds a negative amount): every reservation is refused until
// an operator fixes or removes it.
var ErrUnusable = errors.New("daily token budget unusable")

// Budget is the budget directory and its daily limit.
type Budget struct {
	Dir string
	// Daily is the tokens per UTC day; 0 (or less) refuses everything.
	// With a limit file, it may only lower the file's limit, and 0 takes
	// the file's.
	Daily int64
	// LimitFile is the operator's limit file (limit.go), if any.
	LimitFile string
	// Now is time.Now when nil; tests set the day with it.
	Now func() time.Time
}

// Reservation is tokens held for a task on a day, until settled.
type Reservation struct {
	Task, Day string
	Tokens    int64
}

// Day is one day's account: the limit, what reservations hold and what
// settled tasks spent.
type Day struct{ Limit, Reserved, Spent int64 }

// Reserve holds tokens for task today, or fails with an error wrapping
// ErrExhausted that says the day's limit, what is reserved and spent, and
// what was asked.
func (b Budget) Reserve(task string, tokens int64) (Reservation, error) {
	return b.ReserveOn(task, b.Day(), tokens)
}

// Day is today's date (UTC), the day a reservation made now is on.
func (b Budget) Day() string { return b.today() }

// ReserveOn is Reserve on day, one Day gave: a spawn names the day on its
// task's ledger line before it reserves, so that a reconciler finds the
// reservation of a spawn that died in between.
func (b Budget) ReserveOn(task, day string, tokens int64) (Reservation, error) {
	if task == "" || tokens < 0 {
		return Reservation{}, fmt.Errorf("budget: reserve %d tokens for task %q: need a task and a non-negative estimate", tokens, task)
	}
	r := Reservation{Task: task, Day: day, Tokens: tokens}
	daily, err := b.Limit()
	if err != nil {
		return Reservation{}, err
	}
	err = b.update(day, func(a *account) error {
		if _, dup := a.Reserved[task]; dup {
			return fmt.Errorf("budget %s: task %s already holds a reservation", day, task)
		}
		reserved := a.reserved()
		// Compared as what is left, never as a sum: a sum can wrap
		// past the limit and let everything through.
		if daily <= 0 || tokens > daily || reserved > daily-tokens || a.Spent > daily-tokens-reserved {
			return fmt.Errorf("%w: %s: limit %d tokens, %d reserved, %d spent; task %s asked for %d",
				ErrExhausted, day, max(daily, 0), reserved, a.Spent, task, tokens)
		}
		a.Reserved[task] = tokens
		return nil
	})
	if err != nil {
		return Reservation{}, err
	}
	return r, nil
}

// Settle replaces the reservation with what was actually used (0 releases
// it), on the reservation's day even when the task ended after midnight.
// Settling a reservation the day does not hold is an error, so nothing is
// charged twice. What a sub-agent reports is its own word, so the charge
// is capped at the operator's limit (a huge report spends the day, no more)
// and added saturating: Spent never wraps negative and reopens the day.
func (b Budget) Settle(r Reservation, used int64) error {
	if used < 0 {
		return fmt.Errorf("budget %s: task %s used %d tokens: must not be negative", r.Day, r.Task, used)
	}
	return b.settle(r, func(int64) int64 { return used })
}

// SettleHeld settles r charging what it holds, the task's estimate: for a
// task whose usage nobody can report (its spawner died with it).
func (b Budget) SettleHeld(r Reservation) error {
	return b.settle(r, func(held int64) int64 { return held })
}

// settle replaces r's reservation with the charge used says, given what r
// holds.
func (b Budget) settle(r Reservation, used func(held int64) int64) error {
	return b.update(r.Day, func(a *account) error {
		held, ok := a.Reserved[r.Task]
		if !ok {
			return fmt.Errorf("budget %s: task %s %w (settled already?)", r.Day, r.Task, ErrNoReservation)
		}
		delete(a.Reserved, r.Task)
		charge := used(held)
		if ceiling, err := b.ceiling(); err == nil && ceiling > 0 {
			// Capped at the operator's limit, never at one a spawn
			// lowered it to (that one would charge its sub-agent less
			// than it reports). A settler that does not know the limit
			// (spawn poll with no limit file) charges what was
			// reported; the sum saturates either way.
			charge = min(charge, ceiling)
		}
		a.Spent = addSat(a.Spent, charge)
		return nil
	})
}

// addSat is a+b for non-negative a and b, stopping at math.MaxInt64.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// Today is today's account.
func (b Budget) Today() (Day, error) {
	daily, err := b.Limit()
	if err != nil {
		return Day{}, err
	}
	a, err := b.read(b.today())
	if err != nil {
		return Day{}, err
	}
	return Day{Limit: max(daily, 0), Reserved: a.reserved(), Spent: a.Spent}, nil
}

func (b Budget) today() string {
	now := time.Now
	if b.Now != nil {
		now = b.Now
	}
	return now().UTC().Format(time.DateOnly)
}

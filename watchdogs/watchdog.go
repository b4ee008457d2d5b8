package watchdogs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// Finding is what one probe saw. The zero Finding is healthy.
type Finding struct {
	// Kind names the fault for the inbox line (shim_dead, shim_hung); ""
	// is healthy.
	Kind string
	// Detail says what was seen, for a human: the URL, the error.
	Detail string
	// Strike marks a suspicion, not yet a fault: a probe that timed out
	// may be a slow answer. It becomes a fault after StrikesToFault in a
	// row; a SIGSTOPped process is caught that way.
	Strike bool
	// Blind marks a probe that could not look (its evidence unreadable,
	// the pod's admin socket silent): nothing is known of the service, so
	// nothing is restarted; it is said once per streak.
	Blind bool
}

// Probe looks at the watched thing once.
type Probe interface {
	Probe(ctx context.Context) Finding
}

// Recoverer acts on a fault: restarts the thing, making sure the old
// instance (a hung one too) is gone before the new one starts.
type Recoverer interface {
	Recover(ctx context.Context) error
}

// Settler is a Probe with a check for after a restart that leaves the
// evidence the next round reads where it was (a log offset, the OOM kills
// and exits seen): a fault found while settling is the next round's to
// judge.
type Settler interface {
	Settled(ctx context.Context) Finding
}

// Watchdog is one watchdog: the probe, the recovery and the rules around
// them. Set the fields, then call Once or Run.
type Watchdog struct {
	Source  string // the inbox lines' source: "watchdog-shim"
	Service string // the service the lines are about: "shim"
	Probe   Probe
	Recover Recoverer
	Budget  Budget
	// StrikesToFault is how many strikes in a row make a fault (hung
	// after N timeouts); 0 or 1 means the first.
	StrikesToFault int
	// Settle bounds the wait, after a recovery, for the probe to find
	// the service healthy again; past it the recovery failed.
	Settle time.Duration
	// StatePath, when set, is read before and written after every round.
	StatePath string
	Inbox     *events.Log
	Log       *slog.Logger
	// Now is the clock (time.Now when nil): tests move the budget's
	// window without waiting for it.
	Now func() time.Time
	// Observe, when set, is told each round's result and the state after
	// it, before the state is saved: the metrics, which keep their
	// counters in it. A round cut short by the watchdog's stop is not
	// told: it found nothing.
	Observe func(Result, *State)

	st State // between rounds; loaded from StatePath before each when set
}

// Outcome is what a round did, for the caller's exit code.
type Outcome int

const (
	Healthy   Outcome = iota // nothing wrong
	Suspect                  // a strike short of a fault: nothing done yet
	Recovered                // a fault, recovered and answering again
	Failed                   // a fault whose recovery did not bring it back
	GaveUp                   // a fault past the budget: nothing done
	Blind                    // the probe could not look: nothing done
)

var outcomeNames = [...]string{"healthy", "suspect", "recovered", "failed", "gave up", "blind"}

func (o Outcome) String() string { return outcomeNames[o] }

// Result is a round's outcome and, when it found a fault, the fault and
// what the last inbox line said about it.
type Result struct {
	Outcome Outcome
	Kind    string
	Detail  string
	// Took is, for Recovered, the time from the fault's finding to the
	// service's first healthy probe after the recovery.
	Took time.Duration
}

// Remembering is a Probe that keeps memory of its own between rounds (the
// log offset it has read up to, the OOM kills it has seen): it is kept in
// the state file with the watchdog's.
type Remembering interface {
	Restore(json.RawMessage) error
	Remember() (json.RawMessage, error)
}

// Once runs one round: probe, and on a fault recover within the budget,
// each step one inbox line. When StatePath is set, the round holds the
// state's lock throughout (another run under way is ErrBusy: nothing is
// done), and the state is loaded first and saved last; a state (or lock)
// it cannot read or believe is a critical state_unreadable line and its
// error. A fault it could not recover is its Result, not an error: the
// error is the watchdog's own failure (state, inbox), which would leave it
// blind or mute.
func (w *Watchdog) Once(ctx context.Context) (Result, error) {
	mem, remembers := w.Probe.(Remembering)
	if w.StatePath != "" {
		lock, err := lockState(w.StatePath)
		if errors.Is(err, ErrBusy) {
			return Result{}, err
		}
		if errors.Is(err, ErrStuck) {
			// At every run while it lasts: the runs that could remember
			// having said it cannot take the lock either.
			return Result{}, errors.Join(err, w.report(KindStuck, events.Critical, err.Error(), false))
		}
		if err != nil {
			return Result{}, w.stateUnreadable(nil, err)
		}
		defer lock.unlock()
		st, err := LoadState(w.StatePath)
		if err == nil && remembers {
			if rerr := mem.Restore(st.Probe); rerr != nil {
				err = fmt.Errorf("watchdog state %s: %w (remove it to start afresh)", w.StatePath, rerr)
			}
		}
		if err != nil {
			return Result{}, w.stateUnreadable(lock, err)
		}
		if err := lock.say(""); err != nil {
			return Result{}, err
		}
		w.st = st
	}
	res, err := w.round(ctx)
	if w.Observe != nil && ctx.Err() == nil {
		w.Observe(res, &w.st)
	}
	if w.StatePath != "" {
		if remembers {
			raw, merr := mem.Remember()
			err = errors.Join(err, merr)
			w.st.Probe = raw
		}
		err = errors.Join(err, w.st.Save(w.StatePath))
	}
	return res, err
}

// KindStuck is the line of a run that finds the state's lock held for
// longer than any round takes (ErrStuck).
const KindStuck = "watchdog_stuck"

// KindStateUnreadable is the line of a watchdog whose state file cannot be
// read or believed: it runs no round until the file is fixed (or removed),
// for guessing would reset the budget; a service down meanwhile stays down.
const KindStateUnreadable = "state_unreadable"

// stateUnreadable says, in the inbox, that the state cannot be read (err):
// only the journal would, where a timer's run fails every few minutes
// unseen. Once per streak of runs that cannot (the lock file keeps what was
// said), or at every run when its lock cannot be taken either (lock nil);
// a line that could not be written is tried again by the next run.
func (w *Watchdog) stateUnreadable(lock *stateLock, err error) error {
	if lock != nil && lock.said() == err.Error() {
		w.Log.Error("watchdog: state still unreadable", "service", w.Service, "detail", err.Error())
		return err
	}
	detail := err.Error() + "; the watchdog restarts nothing until it is fixed"
	if rerr := w.report(KindStateUnreadable, events.Critical, detail, false); rerr != nil {
		return errors.Join(err, rerr)
	}
	if lock == nil {
		return err
	}
	return errors.Join(err, lock.say(err.Error()))
}

// Run runs a round every interval until ctx ends. A fault it could not
// recover is reported (inbox and log) and the loop goes on: the next round
// may find the service back, or the budget spent. A round another run
// holds the state's lock for is skipped. Only the watchdog's own failure,
// which would make it mute, ends it.
func (w *Watchdog) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := w.Once(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A run by hand beside the daemon: its round stands for
			// this one.
			if !errors.Is(err, ErrBusy) && !errors.Is(err, ErrStuck) {
				return err
			}
			w.Log.Warn("watchdog: round skipped", "service", w.Service, "detail", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (w *Watchdog) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *Watchdog) round(ctx context.Context) (Result, error) {
	st := &w.st
	now := w.now()
	// Every round, so that the state (and restarts_in_window) says the
	// window as it is now, not as of the last fault.
	st.Restarts = w.Budget.prune(st.Restarts, now)
	f := w.Probe.Probe(ctx)
	if err := ctx.Err(); err != nil {
		// Stopped (SIGTERM) mid-probe: the probe failed because of us,
		// not the service. No finding, and no restart on the way out.
		return Result{}, err
	}
	if f.Blind {
		res := Result{Outcome: Blind, Kind: f.Kind, Detail: f.Detail}
		if st.Blind { // said once already
			w.Log.Warn("watchdog: still blind", "service", w.Service, "detail", f.Detail)
			return res, nil
		}
		// Marked said only once the inbox has it: a line that could
		// not be written is tried again next round.
		err := w.report(f.Kind, events.Warning, f.Detail+"; nothing restarted while the watchdog cannot see", false)
		st.Blind = err == nil
		return res, err
	}
	st.Blind = false
	if f.Kind == "" {
		st.Strikes, st.GaveUp = 0, false
		return Result{Outcome: Healthy}, nil
	}
	if f.Strike {
		st.Strikes++
		if st.Strikes < w.StrikesToFault {
			w.Log.Warn("watchdog: suspect", "service", w.Service, "kind", f.Kind, "strike", st.Strikes, "of", w.StrikesToFault, "detail", f.Detail)
			return Result{Outcome: Suspect, Kind: f.Kind, Detail: f.Detail}, nil
		}
	}
	st.Strikes = 0
	if ok, until := w.Budget.allows(st.Restarts); !ok {
		detail := fmt.Sprintf("%s: %s; %d restarts in %v already, none more until %s: find the cause",
			f.Kind, f.Detail, w.Budget.Max, w.Budget.Window, until.UTC().Format(time.RFC3339))
		res := Result{Outcome: GaveUp, Kind: f.Kind, Detail: detail}
		if st.GaveUp { // said once already
			w.Log.Error("watchdog: given up", "service", w.Service, "detail", detail)
			return res, nil
		}
		err := errors.Join(w.report(f.Kind, events.Warning, f.Detail, false), w.report("give_up", events.Critical, detail, false))
		st.GaveUp = err == nil
		return res, err
	}
	if err := w.report(f.Kind, events.Warning, f.Detail, false); err != nil {
		return Result{Outcome: Failed, Kind: f.Kind, Detail: f.Detail}, err
	}
	// Restarting again: when the budget is spent anew, that is said anew.
	st.GaveUp = false
	st.Restarts = append(st.Restarts, now)
	found := time.Now()
	if err := w.Recover.Recover(ctx); err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err() // stopped: the restart failed because of us
		}
		detail := fmt.Sprintf("after %s: %v", f.Kind, err)
		return Result{Outcome: Failed, Kind: f.Kind, Detail: detail}, w.report("restart", events.Critical, detail, false)
	}
	if last, ok := w.settle(ctx); !ok {
		if ctx.Err() != nil {
			return Result{}, ctx.Err() // stopped while it settled: no verdict
		}
		detail := fmt.Sprintf("after %s: restarted, but not healthy within %v: %s", f.Kind, w.Settle, last.Detail)
		return Result{Outcome: Failed, Kind: f.Kind, Detail: detail}, w.report("restart", events.Critical, detail, false)
	}
	took := time.Since(found)
	detail := fmt.Sprintf("after %s: healthy again %v after the fault was found", f.Kind, took.Round(time.Millisecond))
	return Result{Outcome: Recovered, Kind: f.Kind, Detail: detail, Took: took}, w.report("restart", events.Info, detail, true)
}

// settle probes until the service is healthy or Settle has passed; it
// returns the last finding when it is not.
func (w *Watchdog) settle(ctx context.Context) (Finding, bool) {
	ctx, cancel := context.WithTimeout(ctx, w.Settle)
	defer cancel()
	t := time.NewTicker(settlePoll)
	defer t.Stop()
	check := w.Probe.Probe
	if s, ok := w.Probe.(Settler); ok {
		check = s.Settled
	}
	var last Finding
	for {
		f := check(ctx)
		if f.Kind == "" {
			return f, true
		}
		// A probe cut short by this wait's end says nothing of the
		// service: keep the one before it.
		if ctx.Err() == nil || last.Kind == "" {
			last = f
		}
		select {
		case <-ctx.Done():
			return last, false
		case <-t.C:
		}
	}
}

// settlePoll is how often settle probes: a restarted shim answers within
// a second, and this bounds the fault-to-recovered time it adds.
const settlePoll = 50 * time.Millisecond

// report writes one inbox line and logs it.
func (w *Watchdog) report(kind string, sev events.Severity, detail string, recovered bool) error {
	level := slog.LevelWarn
	switch sev {
	case events.Info:
		level = slog.LevelInfo
	case events.Critical:
		level = slog.LevelError
	}
	w.Log.Log(context.Background(), level, "watchdog: "+kind, "service", w.Service, "detail", detail, "recovered", recovered)
	err := w.Inbox.Append(events.Event{Source: w.Source, Kind: kind, Severity: sev, Service: w.Service, Detail: detail, Recovered: recovered})
	if err != nil {
		return fmt.Errorf("watchdog %s: inbox: %w", w.Source, err)
	}
	return nil
}

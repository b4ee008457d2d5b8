// Package spawn is `airlock spawn`'s flow, in order: the kind is loaded
// and checked against the verified bundle → a dry run describes the
// preset and stops → the ledger says queued → the kind's token estimate is
// reserved against the day's budget → the task is rendered into the
// sub-agent's directory → running → the substrate runs it → result.json
// → done, failed or timeout → the reservation is settled at what was used.
//
// The flow is a client of the layers below it and never widens what a
// sub-agent can do: the bundle is the one the caller opened with its pin
// or lock (Spawner.Engine), the sandbox is decided by that same bundle
// (Job.Policy), and every refusal stops before anything runs.
package spawn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/policies"
)

// Spawner spawns sub-agents from a home's kinds.
type Spawner struct {
	Home orchestrator.Home
	// Engine holds the bundle, opened with its pin or lock (policies.New
	// refuses a mismatch with ErrIntegrity before a Spawner exists).
	Engine *policies.Engine
	Budget budget.Budget
	// Substrates by name ("local", "git").
	Substrates map[string]Substrate
	// Unavailable says, for a substrate this run lacks, what it needs:
	// the usage error names it.
	Unavailable map[string]string
	Now         func() time.Time
	Log         *slog.Logger
}

// Request is one `airlock spawn`.
type Request struct {
	Kind      string
	TaskFile  string
	Substrate string // "": the kind's
	DryRun    bool
	Async     bool
}

// UsageError is a request that cannot be served as asked (an unknown or
// invalid kind, a missing task file, an unknown substrate): exit 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Spawn runs req to its end (or, async, hands it over). A refusal before
// anything ran is an error (budget.ErrExhausted over budget, *UsageError);
// a sub-agent that ran and failed is a Result with its status, not an
// error.
func (s *Spawner) Spawn(ctx context.Context, req Request) (Result, error) {
	k, err := kind.Load(s.Home.Kinds(), req.Kind)
	if err != nil {
		return Result{}, &UsageError{err}
	}
	if err := k.Check(s.Engine, req.Substrate); err != nil {
		return Result{}, &UsageError{fmt.Errorf("kind %s: %w", k.Name, err)}
	}
	name := req.Substrate
	if name == "" {
		name = k.Substrate
	}
	if req.DryRun {
		// What the kind's preset reaches, wherever it would run: no
		// substrate is needed to say so.
		d, err := s.Engine.Describe(k.Preset)
		if err != nil {
			return Result{}, err
		}
		return Result{Kind: k.Name, Substrate: name, Plan: &d}, nil
	}
	sub, ok := s.Substrates[name]
	if !ok {
		if why, known := s.Unavailable[name]; known {
			return Result{}, &UsageError{fmt.Errorf("substrate %q %s", name, why)}
		}
		return Result{}, &UsageError{fmt.Errorf("substrate %q: this airlock has %v", name, s.substrateNames())}
	}
	if a, ok := sub.(AsyncSubstrate); req.Async && (!ok || !a.Async()) {
		return Result{}, &UsageError{fmt.Errorf("--async: the %s substrate runs a sub-agent in the foreground only", name)}
	}
	text, err := os.ReadFile(req.TaskFile)
	if err != nil {
		return Result{}, &UsageError{fmt.Errorf("--task-file: %w", err)}
	}

	// This process is named on the task's queued and running lines: should
	// it die before the task's end, a reconciler sees it gone and settles
	// the task (local.Reconcile).
	self, err := ledger.Self()
	if err != nil {
		return Result{}, fmt.Errorf("name this spawn in the ledger: %w", err)
	}
	id := orchestrator.NewTaskID(s.now())
	base := ledger.Entry{Task: id, Kind: k.Name, Substrate: name}
	res := Result{Task: id, Kind: k.Name, Substrate: name}
	// A limit above the operator's is a usage error, before anything is
	// written.
	if _, err := s.Budget.Limit(); errors.Is(err, budget.ErrAboveLimit) {
		return Result{}, &UsageError{err}
	}
	// The queued line, naming this spawn and the day, before the tokens
	// are reserved: a spawn that dies in between leaves a reservation a
	// reconciler finds and releases, never one no line names.
	day := s.Budget.Day()
	if err := ledger.Append(s.Home.Ledger(), carried(base, ledger.Queued, self, day)); err != nil {
		return res, fmt.Errorf("ledger: %w", err)
	}
	resv, err := s.Budget.ReserveOn(id, day, k.Tokens)
	if now := s.Budget.Day(); errors.Is(err, budget.ErrExhausted) && now > day {
		// The day turned between the line and the reservation: refused
		// now, a scheduler would stop for the whole new day. Its budget
		// is asked, the task queued again on it.
		day = now
		if err := ledger.Append(s.Home.Ledger(), carried(base, ledger.Queued, self, day)); err != nil {
			return res, fmt.Errorf("ledger: %w", err)
		}
		resv, err = s.Budget.ReserveOn(id, day, k.Tokens)
	}
	if err != nil {
		event := "budget_exhausted"
		switch {
		case errors.Is(err, budget.ErrExhausted), errors.Is(err, budget.ErrAboveLimit):
		case errors.Is(err, budget.ErrUnusable):
			// A refusal too (exit 77: no retry spends), until fixed.
			event = "budget_unusable"
		default:
			// What failed may have come after the reservation was
			// written (a directory's fsync): released, if it was.
			s.settleMade(budget.Reservation{Task: id, Day: day}, 0, false)
			return s.ended(res, base, fmt.Errorf("budget %s: %w", s.Budget.Dir, err))
		}
		res.Status, res.Detail = ledger.Refused, err.Error()
		s.appendLedger(base, ledger.Refused, nil, nil, err.Error())
		s.event(event, fmt.Sprintf("task %s (kind %s) refused: %v", id, k.Name, err))
		return res, err
	}
	job, err := s.render(k, id, text)
	if err == nil {
		job.Async, job.Reserved = req.Async, resv.Day
		err = ledger.Append(s.Home.Ledger(), carried(base, ledger.Running, self, resv.Day))
	}
	if err != nil {
		return s.fail(res, resv, base, err)
	}
	out, err := sub.Run(ctx, job)
	if err != nil {
		return s.fail(res, resv, base, err)
	}
	if !ledger.Terminal(out.Status) {
		// Handed over: the reconciler settles it.
		out.Task, out.Kind, out.Substrate = id, k.Name, name
		return out, nil
	}
	out.Task, out.Kind, out.Substrate = id, k.Name, name
	if err := WriteResult(job.Dir, out); err != nil {
		out.Detail = joinDetail(out.Detail, err.Error())
		out.Status = ledger.Failed
	}
	used := k.Tokens
	if out.Usage != nil {
		used = out.Usage.Tokens
	}
	// Settled first: a spawn that dies between the two leaves the task
	// running in the ledger, which a reconciler settles (once: Settle
	// refuses a second time); the other way round, a terminal line no
	// reconciler looks at again, and the estimate held, never the usage.
	s.settle(resv, used)
	exit := out.Exit
	s.appendLedger(base, out.Status, &exit, out.Usage, out.Detail)
	if out.Status != ledger.Done {
		s.event("spawn_failed", fmt.Sprintf("task %s (kind %s) %s: %s", id, k.Name, out.Status, out.Detail))
	}
	return out, nil
}

// fail ends a task that could not be carried out: nothing the sub-agent
// did is counted (the reservation is released), the ledger and the inbox
// say why.
func (s *Spawner) fail(res Result, resv budget.Reservation, base ledger.Entry, err error) (Result, error) {
	s.settle(resv, 0)
	return s.ended(res, base, err)
}

// ended records a task that could not run, its reservation settled: failed
// in the ledger, and the inbox told.
func (s *Spawner) ended(res Result, base ledger.Entry, err error) (Result, error) {
	res.Status, res.Detail = ledger.Failed, err.Error()
	s.appendLedger(base, ledger.Failed, nil, nil, err.Error())
	s.event("spawn_failed", fmt.Sprintf("task %s (kind %s) could not run: %v", base.Task, base.Kind, err))
	return res, err
}

// carried is the task's line of status st carried by the spawner self,
// its tokens reserved on day.
func carried(base ledger.Entry, st ledger.Status, self *ledger.Process, day string) ledger.Entry {
	e := entry(base, st)
	e.Spawner, e.Reserved = self, day
	return e
}

func entry(base ledger.Entry, st ledger.Status) ledger.Entry {
	base.Status = st
	return base
}

// appendLedger writes a terminal line; failing to is logged loudly, as
// the outcome it records has already happened.
func (s *Spawner) appendLedger(base ledger.Entry, st ledger.Status, exit *int, u *ledger.Usage, detail string) {
	e := entry(base, st)
	e.Exit, e.Usage, e.Detail = exit, u, detail
	if err := ledger.Append(s.Home.Ledger(), e); err != nil {
		s.log().Error("the ledger could not be written", "task", base.Task, "status", st, "err", err)
	}
}

func (s *Spawner) settle(r budget.Reservation, used int64) { s.settleMade(r, used, true) }

// settleMade settles r; made says the reservation was made, so that its
// absence is said (its usage charged nowhere). Without made (a reserve
// that failed, perhaps after writing it), there may be none to settle.
func (s *Spawner) settleMade(r budget.Reservation, used int64, made bool) {
	if err := s.Budget.Settle(r, used); err != nil && (made || !errors.Is(err, budget.ErrNoReservation)) {
		s.log().Error("the budget could not be settled", "task", r.Task, "day", r.Day, "used", used, "err", err)
	}
}

func (s *Spawner) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Spawner) substrateNames() []string {
	var names []string
	for n := range s.Substrates {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// workDir is the sub-agent's writable directory inside its spawn dir.
const workDir = "work"

// render writes the task into subagents/<id>/: prompt.txt, task and the
// kind as it is now (kind.yaml). The directory and its files are root's and
// no other user's to read (a task may hold what only the operator should
// see); the local substrate gives its sandbox's group read access. The
// sub-agent's uid may only write in work/, so it cannot rewrite its own
// prompt, result or audit log.
func (s *Spawner) render(k *kind.Kind, id string, text []byte) (Job, error) {
	dir := s.Home.Subagent(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return Job{}, fmt.Errorf("render task %s: %w", id, err)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		return Job{}, fmt.Errorf("render task %s: %w", id, err)
	}
	job := Job{ID: id, Kind: k, Dir: dir, Work: filepath.Join(dir, workDir), Policy: s.Engine.Hash()}
	prompt, err := k.RenderPrompt(kind.Task{ID: id, Kind: k.Name, Text: string(text)})
	if err != nil {
		return job, fmt.Errorf("kind %s: prompt: %w", k.Name, err)
	}
	files := map[string][]byte{"prompt.txt": []byte(prompt), "task": text, "kind.yaml": k.Source}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
			return job, fmt.Errorf("render task %s: %w", id, err)
		}
	}
	if err := os.Mkdir(job.Work, 0o750); err != nil {
		return job, fmt.Errorf("render task %s: %w", id, err)
	}
	job.Args, err = k.RenderArgs(kind.ArgVars{ID: id, Dir: job.Work,
		PromptFile: filepath.Join(dir, "prompt.txt"), TaskFile: filepath.Join(dir, "task")})
	if err != nil {
		return job, fmt.Errorf("kind %s: args: %w", k.Name, err)
	}
	return job, nil
}

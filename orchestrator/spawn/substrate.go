package spawn

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/kind"
)

// Job is one sub-agent run, rendered and ready: what a substrate needs to
// carry it out and nothing it could widen. Dir holds prompt.txt, task and
// kind.yaml (the kind as it was when the task was spawned); the substrate
// adds stdout.log, stderr.log and audit.jsonl beside them.
type Job struct {
	ID   string
	Kind *kind.Kind
	Dir  string
	// Work is the one directory the sub-agent may write in (its working
	// directory, Dir/work): the files beside it (its audit log above
	// all) are the orchestrator's, out of the sub-agent's reach.
	Work string
	// Args are the kind's args rendered for this task.
	Args []string
	// Policy is the hash of the bundle the spawn verified: the sandbox
	// must be decided by exactly that bundle.
	Policy string
	// Async asks the substrate to return once the task is handed over;
	// a substrate that cannot is never given one (Spawn refuses first).
	Async bool
	// Reserved is the UTC day (YYYY-MM-DD) the task's tokens are reserved
	// on: a reconciler settles them there, whenever the task ends.
	Reserved string
}

// Substrate runs a Job to its end (or, for an async job, hands it over).
// It returns the outcome as result.json's fields it knows (status, exit
// code, times, usage, result, detail); an error means the job could not be
// carried out at all, and says why.
type Substrate interface {
	Run(ctx context.Context, job Job) (Result, error)
}

// AsyncSubstrate is a Substrate that can hand a task over and return
// (--async): its result is collected later by a reconciler.
type AsyncSubstrate interface {
	Substrate
	Async() bool
}

// now is Spawner.Now, or time.Now when that is nil.
func (s *Spawner) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

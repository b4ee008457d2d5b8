// Package ledger is the orchestrator's task ledger, queue/tasks.jsonl: one
// JSON line per transition of a task (queued → running → done | failed |
// timeout, or refused), append-only and fsync'd, so what happened to a
// task survives a crash of the spawn that ran it.
//
// Many spawns append at once: each Append holds an exclusive flock on the
// file and writes its whole line with one write(2). A crash can still
// leave a torn last line; Append ends it before writing, so the next line
// is whole, and Read skips what does not parse and counts it.
package ledger

import (
	"time"
)

// Status is where a task is.
type Status string

const (
	Queued  Status = "queued"
	Running Status = "running"
	Done    Status = "done"
	Failed  Status = "failed"
	Timeout Status = "timeout"
	// Refused: the budget refused the task (exit 77); nothing ran.
	Refused Status = "refused"
)

// Statuses are every status, in the order a task meets them.
func Statuses() []Status { return []Status{Queued, Running, Done, Failed, Timeout, Refused} }

// Terminal says whether a task in status s is over: done, failed, timeout
// or refused.
func Terminal(s Status) bool {
	switch s {
	case Done, Failed, Timeout, Refused:
		return true
	}
	return false
}

// Usage is what a task consumed.
type Usage struct {
	Tokens int64 `json:"tokens"`
}

// Entry is one line of the ledger: one transition of one task.
type Entry struct {
	TS        time.Time `json:"ts"`
	Task      string    `json:"task"`
	Kind      string    `json:"kind"`
	Substrate string    `json:"substrate"`
	Status    Status    `json:"status"`
	Exit      *int      `json:"exit_code,omitempty"`
	Usage     *Usage    `json:"usage,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	// Spawner is the process carrying the task (queued and running
	// lines), and Reserved the UTC day its tokens are reserved on: what a
	// reconciler needs to end and settle the task should that process die.
	Spawner  *Process `json:"spawner,omitempty"`
	Reserved string   `json:"reserved_day,omitempty"`
}

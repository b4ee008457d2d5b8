package ledger

import "time"

// Task is one task as its ledger lines leave it (`airlock ledger --json`
// prints it).
type Task struct {
	ID        string    `json:"task"`
	Kind      string    `json:"kind"`
	Substrate string    `json:"substrate"`
	Status    Status    `json:"status"`
	Queued    time.Time `json:"queued,omitzero"` // zero when not reached
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	Exit      *int      `json:"exit_code,omitempty"`
	Usage     *Usage    `json:"usage,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	Spawner   *Process  `json:"spawner,omitempty"`
	Reserved  string    `json:"reserved_day,omitempty"`
}

// Fold folds entries into one Task per task id, in first-seen order. The
// last line of a task wins its status; Queued and Started are the times of
// the first line that reached them, Ended that of the last terminal line
// (a reconciler may correct an outcome); exit code, usage and detail are
// the last given.
func Fold(entries []Entry) []Task {
	var tasks []Task
	at := map[string]int{}
	for _, e := range entries {
		i, ok := at[e.Task]
		if !ok {
			i = len(tasks)
			at[e.Task] = i
			tasks = append(tasks, Task{ID: e.Task})
		}
		t := &tasks[i]
		t.Status = e.Status
		if e.Kind != "" {
			t.Kind = e.Kind
		}
		if e.Substrate != "" {
			t.Substrate = e.Substrate
		}
		switch {
		case e.Status == Queued:
			first(&t.Queued, e.TS)
		case e.Status == Running:
			first(&t.Started, e.TS)
		case Terminal(e.Status):
			t.Ended = e.TS
		}
		if e.Exit != nil {
			t.Exit = e.Exit
		}
		if e.Usage != nil {
			t.Usage = e.Usage
		}
		if e.Detail != "" {
			t.Detail = e.Detail
		}
		if e.Spawner != nil {
			t.Spawner = e.Spawner
		}
		if e.Reserved != "" {
			t.Reserved = e.Reserved
		}
	}
	return tasks
}

// first sets *t to ts unless it is already set.
func first(t *time.Time, ts time.Time) {
	if t.IsZero() {
		*t = ts
	}
}

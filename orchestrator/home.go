package orchestrator

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Home is the orchestrator's directory: --home, else $AIRLOCK_HOME, else
// /var/lib/airlock/agent (root) or ~/.local/share/airlock/agent. Every
// path below it is derived here, so the parts of the orchestrator (spawn,
// poll, collect, gate, ledger) agree on the layout.
type Home struct{ Dir string }

// DefaultHome is $AIRLOCK_HOME when set, else the root or per-user
// default. A relative $AIRLOCK_HOME is made absolute: a sub-agent runs in
// another working directory, and must find the same home.
func DefaultHome() (Home, error) {
	if d := os.Getenv("AIRLOCK_HOME"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return Home{}, fmt.Errorf("AIRLOCK_HOME %q: %w", d, err)
		}
		return Home{Dir: abs}, nil
	}
	if os.Geteuid() == 0 {
		return Home{Dir: "/var/lib/airlock/agent"}, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return Home{}, fmt.Errorf("no orchestrator home: set --home or AIRLOCK_HOME (%w)", err)
	}
	if h == "" {
		return Home{}, errors.New("no orchestrator home: set --home or AIRLOCK_HOME ($HOME is empty)")
	}
	return Home{Dir: filepath.Join(h, ".local", "share", "airlock", "agent")}, nil
}

// Kinds holds the kind manifests, <name>.yaml each.
func (h Home) Kinds() string { return filepath.Join(h.Dir, "kinds") }

// Ledger is the append-only task ledger.
func (h Home) Ledger() string { return filepath.Join(h.Dir, "queue", "tasks.jsonl") }

// Budget holds the daily token budget, one file per UTC day.
func (h Home) Budget() string { return filepath.Join(h.Dir, "budget") }

// BudgetLimit is the operator's daily limit, when it is set in the home
// (budget.Budget.LimitFile).
func (h Home) BudgetLimit() string { return filepath.Join(h.Dir, "budget.yaml") }

// Subagent is one task's directory (prompt, task, kind snapshot, logs,
// result).
func (h Home) Subagent(id string) string { return filepath.Join(h.Dir, "subagents", id) }

// Memory is the day's memory file (collected results, parked drafts).
func (h Home) Memory(day string) string { return filepath.Join(h.Dir, "memory", day+".md") }

// Inbox is the events file (internal/events writer).
func (h Home) Inbox() string { return filepath.Join(h.Dir, "agent-inbox.jsonl") }

// ActionLog is the action gate's decision log.
func (h Home) ActionLog() string { return filepath.Join(h.Dir, "auto-action-log.jsonl") }

// KillFile, while it exists, halts every auto action.
func (h Home) KillFile() string { return filepath.Join(h.Dir, ".auto-disabled") }

// NewTaskID is a task id: the UTC time to the second and 6 random hex
// digits, "20261123-190102-3f9a2c". Ids sort by time, and are safe in a
// file name and a git branch name (spawn/<id>).
func NewTaskID(now time.Time) string {
	var b [3]byte
	// crypto/rand.Read never fails (Go 1.24+: it crashes the program
	// rather than return weak bytes).
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// Today is now's UTC day, "2026-11-23": the budget's and the memory
// file's unit.
func Today(now time.Time) string { return now.UTC().Format(time.DateOnly) }

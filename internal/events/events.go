// Package events is the pod's events file: every lifecycle change the
// supervisor, the proxy, the policy engine or a host watchdog reports (a
// boot step, a crash, a restart, a policy rejected, a hung shim replaced)
// is one JSON line in one file, which the operator, `airlock events` and an
// agent read while it is being written.
//
// The file must stay whole through what a supervisor lives through: several
// writers (goroutines, and processes sharing the file), a crash mid-write,
// rotation by size, and readers that never take the writers' lock. So each
// line is one write(2) on an O_APPEND descriptor, made and fsync'd under an
// exclusive flock of the live file; rotation renames under the same lock, so
// a line never straddles two files; and readers skip the torn line a killed
// writer leaves, while the next writer starts on a fresh line.
package events

import (
	"fmt"
	"time"
)

// DefaultFile is the events file's name in the pod's state directory.
const DefaultFile = "agent-inbox.jsonl"

// Severity says how much an event needs a human.
type Severity string

const (
	Info     Severity = "info"
	Warning  Severity = "warning"
	Critical Severity = "critical"
)

// Event is one line of the file.
type Event struct {
	TS        time.Time `json:"ts"`     // RFC3339Nano UTC; Append fills it if zero
	Source    string    `json:"source"` // "supervisor", "proxy", "policy", "ingress", "watchdog-shim", ...
	Kind      string    `json:"kind"`   // boot_step, ready, exit, restart, give_up, health, policy_reload, policy_reject, pin_mismatch, oom_kill, stop, ...
	Severity  Severity  `json:"severity"`
	Service   string    `json:"service,omitempty"`
	Detail    string    `json:"detail"`
	Recovered bool      `json:"recovered"`
}

// check refuses an event a reader could not sort or filter: a caller's bug,
// said loudly rather than written as a line nobody can place.
func (e *Event) check() error {
	switch {
	case e.Source == "":
		return fmt.Errorf("event %q has no source", e.Kind)
	case e.Kind == "":
		return fmt.Errorf("event from %q has no kind", e.Source)
	}
	switch e.Severity {
	case Info, Warning, Critical:
		return nil
	}
	return fmt.Errorf("event %s/%s has severity %q, want info, warning or critical", e.Source, e.Kind, e.Severity)
}

package watchdogs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/durable"
)

// State is what one watchdog remembers between rounds. A one-shot run (a
// timer's) starts from the file and writes it back, so "three timeouts in
// a row" and "three restarts in thirty minutes" span runs.
type State struct {
	// Strikes is how many rounds in a row found a suspicion (a probe
	// timeout) that becomes a fault only after Watchdog.StrikesToFault.
	Strikes int `json:"strikes"`
	// Restarts are the times of the recoveries still inside the budget's
	// window, oldest first.
	Restarts []time.Time `json:"restarts"`
	// GaveUp is set once the give_up line is written, so a timer that
	// keeps firing past the budget says it once, not every round (until
	// the service is healthy, or a restart is tried again).
	GaveUp bool `json:"gave_up"`
	// Blind is set once a blind round is said, until the probe sees again.
	Blind bool `json:"blind,omitempty"`
	// Probe is what a Remembering probe keeps.
	Probe json.RawMessage `json:"probe,omitempty"`
	// Metrics are the counters the next round's metrics go on from
	// (Metrics.Observe); nil without metrics.
	Metrics *Counts `json:"metrics,omitempty"`
}

// LoadState reads the state file; a missing file is a fresh state. A file
// that does not parse is an error: guessing would reset the budget and let
// a crash loop run on. It is believed as a pid file is (openTrusted): what
// it remembers decides what a root watchdog kills and starts.
func LoadState(path string) (State, error) {
	var st State
	f, _, err := openTrusted(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("watchdog state: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return st, fmt.Errorf("watchdog state %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("watchdog state %s: %w (remove it to start afresh)", path, err)
	}
	return st, nil
}

// Save writes the state atomically (durable.WriteFile).
func (st State) Save(path string) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("watchdog state %s: %w", path, err)
	}
	if err := durable.WriteFile(path, raw, 0o600); err != nil {
		return fmt.Errorf("watchdog state: %w", err)
	}
	return nil
}

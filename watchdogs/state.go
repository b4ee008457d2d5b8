package watchdogs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
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
	// keeps firing past the budget says it once, not every round.
	GaveUp bool `json:"gave_up"`
}

// LoadState reads the state file; a missing file is a fresh state. A file
// that does not parse is an error: guessing would reset the budget and let
// a crash loop run on.
func LoadState(path string) (State, error) {
	var st State
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("watchdog state %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("watchdog state %s: %w (remove it to start afresh)", path, err)
	}
	return st, nil
}

// Save writes the state atomically: a temporary file in the same
// directory, fsync'd, renamed over the old one, and the directory fsync'd,
// so a run killed mid-write leaves the old state or the new, never half.
func (st State) Save(path string) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("watchdog state %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("watchdog state %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // after the rename, nothing is there
	if _, err := f.Write(raw); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("watchdog state %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("watchdog state %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("watchdog state %s: fsync of its directory: %w", path, err)
	}
	return nil
}

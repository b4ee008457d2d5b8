package budget

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"golang.org/x/sys/unix"
)

// account is one day's file.
type account struct {
	// Reserved maps a task to the tokens it holds.
	Reserved map[string]int64 `json:"reserved"`
	Spent    int64            `json:"spent"`
}

func (a *account) reserved() int64 {
	var n int64
	for _, t := range a.Reserved {
		n = addSat(n, t)
	}
	return n
}

func (b Budget) file(day string) string { return filepath.Join(b.Dir, day+".json") }

// update runs change on day's account under the day's lock and writes the
// account back when change succeeds.
func (b Budget) update(day string, change func(*account) error) error {
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	lockPath := filepath.Join(b.Dir, day+".lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := durable.Flock(lock, unix.LOCK_EX); err != nil {
		return fmt.Errorf("budget %s: flock: %w", lockPath, err)
	}
	a, err := b.read(day)
	if err != nil {
		return err
	}
	if err := change(a); err != nil {
		return err
	}
	return b.write(day, a)
}

// read reads day's account; a day with no file is empty. The file is only
// ever replaced by rename, so a reader without the lock sees a whole one.
func (b Budget) read(day string) (*account, error) {
	a := &account{Reserved: map[string]int64{}}
	data, err := os.ReadFile(b.file(day))
	if errors.Is(err, os.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	// A file that does not parse refuses every reservation rather than
	// starting the day afresh: that would overspend.
	if err := json.Unmarshal(data, a); err != nil {
		return nil, fmt.Errorf("budget %s: unreadable, refusing (fix or remove it): %w: %w", b.file(day), ErrUnusable, err)
	}
	if a.Reserved == nil {
		a.Reserved = map[string]int64{}
	}
	// A negative figure would widen the day: the file was not written by
	// this package.
	bad := a.Spent < 0
	for _, t := range a.Reserved {
		bad = bad || t < 0
	}
	if bad {
		return nil, fmt.Errorf("budget %s: a negative amount, refusing (fix or remove it): %w", b.file(day), ErrUnusable)
	}
	return a, nil
}

// write replaces day's file whole (durable.WriteFile).
func (b Budget) write(day string, a *account) error {
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	if err := durable.WriteFile(b.file(day), data, 0o600); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	return nil
}

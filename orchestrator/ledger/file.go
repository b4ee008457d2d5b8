package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"golang.org/x/sys/unix"
)

// Append writes e as one line at the end of the ledger at path, creating
// it (directory 0700, file 0600) when missing. TS is set to now (UTC) when
// zero. The line is on disk (fsync) when Append returns nil.
func Append(path string, e Entry) error {
	if e.Task == "" || !slices.Contains(Statuses(), e.Status) {
		return fmt.Errorf("ledger %s: an entry needs a task and a status, one of %v (got task %q, status %q)", path, Statuses(), e.Task, e.Status)
	}
	if e.TS.IsZero() {
		e.TS = time.Now()
	}
	e.TS = e.TS.UTC()
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	line = append(line, '\n')

	// The flock serialises appenders with each other and with Read.
	f, err := durable.OpenLocked(path)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	if err := durable.AppendLine(f, line); err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	return nil
}

// Read returns the ledger's entries in file order; torn counts the lines
// that do not parse as an entry (a crash's half line) and were skipped. A
// missing ledger has no entries.
func Read(path string) (entries []Entry, torn int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	// A shared lock: no appender is midway through its write.
	if err := durable.Flock(f, unix.LOCK_SH); err != nil {
		return nil, 0, fmt.Errorf("ledger %s: flock: %w", path, err)
	}
	entries, torn, err = durable.ReadLines(f, func(e *Entry) bool { return e.Task != "" && e.Status != "" })
	if err != nil {
		return nil, 0, fmt.Errorf("ledger %s: %w", path, err)
	}
	return entries, torn, nil
}

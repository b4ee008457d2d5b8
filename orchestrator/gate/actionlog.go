package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/durable"
)

// auto-action-log.jsonl: one JSON line per decision, appended with one
// write(2) and fsync'd under an exclusive flock of the file. The flock is
// held from counting today's auto actions to appending the decision, so
// it also serialises the daily caps. A gate killed mid-write leaves a torn
// last line: the next append ends it first, and readers skip it.

// actionLog is the action log, open and flock'd.
type actionLog struct {
	path string
	f    *os.File
}

// lockLog opens the log and takes its flock.
func lockLog(path string) (*actionLog, error) {
	f, err := durable.OpenLocked(path)
	if err != nil {
		return nil, fmt.Errorf("action log: %w", err)
	}
	return &actionLog{path: path, f: f}, nil
}

// close releases the flock; closing again does nothing.
func (l *actionLog) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// autoCounts counts the auto decisions of day (UTC), by action, from the
// log's end (countAuto).
func (l *actionLog) autoCounts(day string) (map[string]int, error) {
	fi, err := l.f.Stat()
	if err != nil {
		return nil, fmt.Errorf("action log %s: %w", l.path, err)
	}
	counts, err := countAuto(l.f, fi.Size(), day)
	if err != nil {
		return nil, fmt.Errorf("action log %s: %w", l.path, err)
	}
	return counts, nil
}

// append writes d as one line and returns once it is on disk. A torn last
// line is ended first, in the same write, so this one is whole.
func (l *actionLog) append(d Decision) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return fmt.Errorf("action log %s: %w", l.path, err)
	}
	if err := durable.AppendLine(l.f, buf.Bytes()); err != nil {
		return fmt.Errorf("action log %s: %w", l.path, err)
	}
	return nil
}

// ReadLog reads an action log: its decisions, in order, and how many lines
// were skipped as torn or unreadable. A missing log has none.
func ReadLog(path string) (ds []Decision, torn int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("action log: %w", err)
	}
	defer f.Close()
	ds, torn, err = readDecisions(f)
	if err != nil {
		return nil, 0, fmt.Errorf("action log %s: %w", path, err)
	}
	return ds, torn, nil
}

// readDecisions reads the log's decisions; a line with no action or
// outcome is torn.
func readDecisions(r io.Reader) ([]Decision, int, error) {
	return durable.ReadLines(r, func(d *Decision) bool { return d.Action != "" && d.Outcome != "" })
}

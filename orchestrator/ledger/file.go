package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

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

	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	_, err = os.Lstat(path)
	created := errors.Is(err, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	// The lock serialises appenders, so that the torn-line check below and
	// the write see the same end of file. (Closing the file releases it.)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("ledger %s: flock: %w", path, err)
	}
	torn, err := endsTorn(f)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	if torn {
		// A crash left half a line: end it, so this line is whole. The
		// half line stays, unreadable, and Read counts it.
		line = append([]byte{'\n'}, line...)
	}
	// One write(2): with O_APPEND and the lock, the line is never
	// interleaved with another, and a crash tears at most this line.
	if _, err := f.Write(line); err != nil {
		return fmt.Errorf("ledger %s: write: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ledger %s: fsync: %w", path, err)
	}
	if created {
		// The new file's name is durable only once its directory is.
		return syncDir(filepath.Dir(path))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ledger %s: fsync: %w", dir, err)
	}
	return nil
}

// endsTorn says whether f is not empty and does not end with a newline.
func endsTorn(f *os.File) (bool, error) {
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if st.Size() == 0 {
		return false, nil
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], st.Size()-1); err != nil {
		return false, fmt.Errorf("read last byte: %w", err)
	}
	return last[0] != '\n', nil
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
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		return nil, 0, fmt.Errorf("ledger %s: flock: %w", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger %s: %w", path, err)
	}
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Entry
		if json.Unmarshal(line, &e) != nil || e.Task == "" || e.Status == "" {
			torn++
			continue
		}
		entries = append(entries, e)
	}
	return entries, torn, nil
}

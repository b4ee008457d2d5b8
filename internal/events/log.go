package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/internal/eintr"
	"golang.org/x/sys/unix"
)

// Options size the file.
type Options struct {
	// MaxBytes rotates the file when a line would take it past this size;
	// 0 means DefaultMaxBytes. A line longer than MaxBytes is still written
	// whole, alone in a fresh file.
	MaxBytes int64
	// Keep is how many rotated files are kept (path.1 is the newest,
	// path.Keep the oldest); 0 means DefaultKeep.
	Keep int
}

const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 3
)

// Log appends events to the live file at its path. Several Logs, in one
// process or in several, may append to the same path: the flock of the
// live file, not the Log's mutex, is what keeps them apart.
type Log struct {
	path string
	max  int64
	keep int

	mu sync.Mutex
	fd int // the live file as this Log last opened it; -1 once closed
}

// Open opens (creating it 0600, and its directory 0711, if missing) the
// events file at path for appending. The directory is traversable, not
// listable, as the pod makes its state directory: a host watchdog, run
// before the pod's first boot, may be the first to make the directories
// down to the pod's inbox, and the pod's services must get through them
// to the CA bundle beside it.
func Open(path string, o Options) (*Log, error) {
	if o.MaxBytes < 0 || o.Keep < 0 {
		return nil, fmt.Errorf("events file %s: MaxBytes %d and Keep %d must not be negative", path, o.MaxBytes, o.Keep)
	}
	l := &Log{path: path, max: o.MaxBytes, keep: o.Keep}
	if l.max == 0 {
		l.max = DefaultMaxBytes
	}
	if l.keep == 0 {
		l.keep = DefaultKeep
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("events file %s: %w", path, err)
	}
	fd, err := openLive(path)
	if err != nil {
		return nil, err
	}
	l.fd = fd
	return l, nil
}

// openLive opens the live file for appending (and reading its last byte:
// see Log.append). O_NOFOLLOW: the file is
// written as root, and a symlink planted at its path must not redirect it.
func openLive(path string) (int, error) {
	fd, err := eintr.Retry(func() (int, error) {
		return unix.Open(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// A file left by an older writer or made by hand is narrowed too:
	// details name services, hosts and operators.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	// The new name must survive a crash as the lines in it will.
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Append writes e as one line and returns once it is on disk (fsync'd).
// TS is set to now when zero, and written in UTC. It is safe for
// concurrent use, and with other Logs (in other processes too) on the same
// path. Its errors name the path.
func (l *Log) Append(e Event) error {
	if err := e.check(); err != nil {
		return fmt.Errorf("append to %s: %w", l.path, err)
	}
	if e.TS.IsZero() {
		e.TS = time.Now()
	}
	e.TS = e.TS.UTC()
	// b[0] is a newline written only when the file does not end in one (a
	// writer died mid-line): it ends the torn line, which readers skip, so
	// this line starts whole. Kept in the buffer so the line stays one write.
	var buf bytes.Buffer
	buf.WriteByte('\n')
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil { // Encode ends the line with '\n'
		return fmt.Errorf("append to %s: encode %s/%s: %w", l.path, e.Source, e.Kind, err)
	}
	b := buf.Bytes()

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fd < 0 {
		return fmt.Errorf("append to %s: %w", l.path, os.ErrClosed)
	}
	if err := l.append(b); err != nil {
		return fmt.Errorf("append to %s: %w", l.path, err)
	}
	return nil
}

// append writes b (b[0] the optional newline) under the live file's flock,
// rotating first when the line would not fit.
func (l *Log) append(b []byte) error {
	for {
		if err := l.lockLive(); err != nil {
			return err
		}
		size, last, err := l.end()
		if err != nil {
			l.unlock()
			return err
		}
		line := b
		if size == 0 || last == '\n' {
			line = b[1:]
		}
		if size > 0 && size+int64(len(line)) > l.max {
			// The file is ended before it is rotated: a line a writer
			// died just before the newline of is whole, and readable.
			if len(line) == len(b) {
				if err := l.write(b[:1], size); err != nil {
					l.unlock()
					return err
				}
			}
			// rotate leaves l.fd on a new live file, unlocked: another
			// process may have created it and written first, so lock and
			// measure again.
			if err := l.rotate(); err != nil {
				return err
			}
			continue
		}
		err = l.write(line, size)
		l.unlock()
		return err
	}
}

// lockLive takes the flock of the file now at the path: l.fd may be a file
// another process has rotated away since this Log opened it, and a line
// written there would land in a rotated file, behind readers that moved on.
func (l *Log) lockLive() error {
	for {
		if err := eintr.Do(func() error { return unix.Flock(l.fd, unix.LOCK_EX) }); err != nil {
			return fmt.Errorf("flock: %w", err)
		}
		var held, named unix.Stat_t
		if err := unix.Fstat(l.fd, &held); err != nil {
			l.unlock()
			return fmt.Errorf("fstat: %w", err)
		}
		err := unix.Lstat(l.path, &named)
		if err == nil && held.Dev == named.Dev && held.Ino == named.Ino {
			return nil
		}
		if err != nil && !errors.Is(err, unix.ENOENT) { // ENOENT: mid-rotation, openLive creates it
			l.unlock()
			return fmt.Errorf("lstat: %w", err)
		}
		fd, err := openLive(l.path)
		if err != nil {
			l.unlock()
			return err
		}
		unix.Close(l.fd) // drops the flock of the rotated file
		l.fd = fd
	}
}

func (l *Log) unlock() { unix.Flock(l.fd, unix.LOCK_UN) }

// end returns the live file's size and its last byte.
func (l *Log) end() (int64, byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(l.fd, &st); err != nil {
		return 0, 0, fmt.Errorf("fstat: %w", err)
	}
	if st.Size == 0 {
		return 0, 0, nil
	}
	last := make([]byte, 1)
	if _, err := eintr.Retry(func() (int, error) { return unix.Pread(l.fd, last, st.Size-1) }); err != nil {
		return 0, 0, fmt.Errorf("read last byte: %w", err)
	}
	return st.Size, last[0], nil
}

// write writes b with one write(2). A write cut short (a full disk) is
// truncated back to size, where the line began, so no partial line is
// left; the next writer would end one with a newline anyway.
func (l *Log) write(b []byte, size int64) error {
	n, err := eintr.Retry(func() (int, error) { return unix.Write(l.fd, b) })
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if n > 0 {
			if terr := unix.Ftruncate(l.fd, size); terr != nil {
				return fmt.Errorf("write: %w; the %d bytes written of the line could not be removed: %v", err, n, terr)
			}
		}
		return fmt.Errorf("write: %w", err)
	}
	if err := eintr.Do(func() error { return unix.Fsync(l.fd) }); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
}

// rotate shifts path.N to path.N+1 (dropping path.Keep), renames the live
// file to path.1 and opens a new one, all while holding the live file's
// flock: no writer can append to it once it has a rotated name (each
// checks the name under the lock first), so a rotated file is complete.
// On return l.fd is the new live file, unlocked.
func (l *Log) rotate() error {
	for i := l.keep - 1; i >= 1; i-- {
		if err := os.Rename(rotated(l.path, i), rotated(l.path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.unlock()
			return fmt.Errorf("rotate: %w", err)
		}
	}
	if err := os.Rename(l.path, rotated(l.path, 1)); err != nil {
		l.unlock()
		return fmt.Errorf("rotate: %w", err)
	}
	fd, err := openLive(l.path) // also syncs the directory, renames included
	l.unlock()
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	unix.Close(l.fd)
	l.fd = fd
	return nil
}

// Close closes the file. Appending after Close is an error.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fd < 0 {
		return fmt.Errorf("close %s: %w", l.path, os.ErrClosed)
	}
	err := unix.Close(l.fd)
	l.fd = -1
	if err != nil {
		return &os.PathError{Op: "close", Path: l.path, Err: err}
	}
	return nil
}

// rotated names the i-th rotated file (1 the newest).
func rotated(path string, i int) string { return path + "." + strconv.Itoa(i) }

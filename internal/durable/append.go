package durable

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/eintr"
	"golang.org/x/sys/unix"
)

// OpenLocked opens path for appending and reading (creating it 0600, its
// directory 0700) and takes its exclusive flock, which closing the file
// releases. Every writer takes the flock, so what one reads under it is
// what its write extends. O_NOFOLLOW: a symlink planted at the path must
// not redirect the write. A file it creates is made durable (its
// directory fsync'd) before it returns.
func OpenLocked(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	_, err := os.Lstat(path)
	created := errors.Is(err, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if created {
		if err := SyncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := Flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return f, nil
}

// AppendLine writes line (ending in '\n') at the end of f, opened and
// flock'd by OpenLocked, and returns once it is on disk. A torn last line
// (a writer killed mid-write) is ended first, in the same write(2), so
// this line is whole; the half line stays for readers to skip.
func AppendLine(f *os.File, line []byte) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], st.Size()-1); err != nil {
			return fmt.Errorf("read %s: %w", f.Name(), err)
		}
		if last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	// One write(2): with O_APPEND and the lock, never interleaved with
	// another, and a crash tears at most this line.
	if _, err := f.Write(line); err != nil {
		return err
	}
	return f.Sync()
}

// Append adds to the file at path what add returns for its content, under
// the file's flock (OpenLocked), and fsyncs it. Writers that share a file
// (a memory file: collect's results, the gate's parked actions) each see
// the others' whole appends and never rewrite them. add returning nothing
// writes nothing.
func Append(path string, add func(have []byte) ([]byte, error)) error {
	f, err := OpenLocked(path)
	if err != nil {
		return err
	}
	defer f.Close()
	have, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	more, err := add(have)
	if err != nil || len(more) == 0 {
		return err
	}
	if _, err := f.Write(more); err != nil {
		return err
	}
	return f.Sync()
}

// Flock is flock(2) on f with how (LOCK_EX, LOCK_SH, LOCK_NB, LOCK_UN),
// again when a signal interrupts the wait. Its error is the errno, for
// errors.Is (EWOULDBLOCK with LOCK_NB).
func Flock(f *os.File, how int) error {
	return eintr.Do(func() error { return unix.Flock(int(f.Fd()), how) })
}

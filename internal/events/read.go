package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Read returns the events with TS at or after since (the zero time: all),
// from the rotated files oldest first, then the live one, as they all were
// at one moment, while writers go on: it does not hold their lock (but see
// snapshot).
// A line that does not parse is skipped: the torn line a writer killed
// mid-write leaves, or a line still being written. A missing file is an
// error that errors.Is fs.ErrNotExist.
func Read(path string, since time.Time) ([]Event, error) {
	files, err := snapshot(path)
	if err != nil {
		return nil, err
	}
	defer closeAll(files)
	var out []Event
	emit := func(e Event) { out = append(out, e) }
	for _, f := range files {
		// Each file's unfinished last line is dropped with it: a rotated
		// file's is torn, the live one's not written yet.
		if err := (&tail{file: f}).drain(since, emit); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// tail reads one file of the chain, line by line, from where it left off.
type tail struct {
	file    *os.File
	off     int64
	partial []byte // bytes after the last newline read
	buf     []byte
}

// drain reads the file from the last offset to its end and passes every
// whole line that is an event at or after since to emit.
func (t *tail) drain(since time.Time, emit func(Event)) error {
	if t.buf == nil {
		t.buf = make([]byte, 64<<10)
	}
	for {
		n, err := t.file.ReadAt(t.buf, t.off)
		t.off += int64(n)
		t.feed(t.buf[:n], since, emit)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
	}
}

func (t *tail) feed(p []byte, since time.Time, emit func(Event)) {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		t.partial = append(t.partial, p...)
		return
	}
	t.partial = append(t.partial, p[:i]...)
	parse(t.partial, since, emit)
	p = p[i+1:]
	for {
		i = bytes.IndexByte(p, '\n')
		if i < 0 {
			break
		}
		parse(p[:i], since, emit)
		p = p[i+1:]
	}
	t.partial = append(t.partial[:0], p...)
}

// parse passes line to emit when it is an event at or after since. A line
// that is not one is skipped: a torn line, ended by the next writer's
// leading newline, or the empty line that newline makes after a line that
// was whole but unterminated.
func parse(line []byte, since time.Time, emit func(Event)) {
	if len(line) == 0 {
		return
	}
	var e Event
	if json.Unmarshal(line, &e) != nil {
		return
	}
	if e.TS.Before(since) {
		return
	}
	emit(e)
}

// snapshot opens the rotated files (oldest first) and the live file as they
// all were at one moment. Writers rename while it looks, so it opens every
// name, then looks again: a rename between the two looks changes what at
// least one name is (a rotated file never comes back to a name it left,
// and the files it holds open cannot be replaced by a file with the same
// inode), and it tries again. Rotations that come faster than it can look
// (tiny files, a disk where fsync is free) would starve it: after a few
// tries it holds a shared flock of the live file while it opens, which no
// rotation can take from it, and which holds writers back only as long as
// the opens take.
func snapshot(path string) ([]*os.File, error) {
	const unlockedTries = 10
	for try := range 100 {
		var held *os.File
		if try >= unlockedTries {
			var err error
			if held, err = holdLive(path); err != nil {
				return nil, err
			}
		}
		files, ok, err := look(path)
		if held != nil {
			held.Close() // drops the flock
		}
		if err != nil || ok {
			return files, err
		}
	}
	return nil, fmt.Errorf("read events %s: the files were renamed at every look (100)", path)
}

// holdLive returns the live file with a shared flock on it, or nil when
// there is none at the moment (mid-rotation).
func holdLive(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	if !same([]string{path}, []*os.File{f}) { // rotated while it waited
		f.Close()
		return nil, nil
	}
	return f, nil
}

// look makes one try of snapshot: ok is false when a name changed.
func look(path string) (files []*os.File, ok bool, err error) {
	names, err := chain(path)
	if err != nil {
		return nil, false, err
	}
	files = make([]*os.File, len(names))
	for i, name := range names {
		f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			closeAll(files)
			return nil, false, err
		}
		files[i] = f
	}
	again, err := chain(path)
	if err != nil || !slices.Equal(names, again) || !same(names, files) {
		closeAll(files)
		return nil, false, err
	}
	files = slices.DeleteFunc(files, func(f *os.File) bool { return f == nil })
	if len(files) == 0 {
		return nil, false, &os.PathError{Op: "read events", Path: path, Err: fs.ErrNotExist}
	}
	return files, true, nil
}

// chain lists path's rotated files, oldest (highest number) first, then
// path itself, whether or not it exists.
func chain(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read events %s: %w", path, err)
	}
	var nums []int
	for _, e := range entries {
		suffix, ok := strings.CutPrefix(e.Name(), base+".")
		if n, err := strconv.Atoi(suffix); ok && err == nil && n > 0 && strconv.Itoa(n) == suffix {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	names := make([]string, 0, len(nums)+1)
	for _, n := range slices.Backward(nums) {
		names = append(names, rotated(path, n))
	}
	return append(names, path), nil
}

// same reports whether each name still is the file opened from it (or
// still missing, for a nil file).
func same(names []string, files []*os.File) bool {
	for i, name := range names {
		now, err := os.Lstat(name)
		if files[i] == nil {
			if !errors.Is(err, fs.ErrNotExist) {
				return false
			}
			continue
		}
		held, herr := files[i].Stat()
		if err != nil || herr != nil || !os.SameFile(held, now) {
			return false
		}
	}
	return true
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

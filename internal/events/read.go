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
// from the rotated files oldest first, then the live one, each file once and
// none skipped, while writers go on: it takes no lock (see snapshot).
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

// snapshot opens the live file and the rotated files before it, oldest
// first, each the one before the next. Writers rotate while it looks, and
// it holds no lock, so it never holds them back: it opens the newest file,
// then walks back one file at a time, each found next to the one after it
// (predecessor). A rotated file never comes back to a name it left, and the
// files it holds open cannot be replaced by a file with the same inode, so
// each step is checked by one look at where the later file still is. A
// step only has to beat one rotation, not the whole chain's listing, which
// rotations coming faster than a listing (tiny files, a disk where fsync is
// free) starved.
func snapshot(path string) ([]*os.File, error) {
	newest, at, err := openNewest(path)
	if err != nil {
		return nil, err
	}
	files := []*os.File{newest}
	for {
		prev, pat, err := predecessor(path, files[0], at)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		if prev == nil {
			return files, nil
		}
		files = slices.Insert(files, 0, prev)
		at = pat
	}
}

// steps bounds the tries of one step of the walk: each fails only when a
// rotation moved the file it starts from during three system calls.
const steps = 1000

// openNewest opens the live file, or, mid-rotation (renamed, its successor
// not yet made), the newest rotated one; at is where it was (0: the live
// file's name).
func openNewest(path string) (f *os.File, at int, err error) {
	for range steps {
		if f, err = openAt(path, 0); f != nil || err != nil {
			return f, 0, err
		}
		if f, err = openAt(path, 1); f != nil || err != nil {
			return f, 1, err
		}
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, 0, &os.PathError{Op: "read events", Path: path, Err: fs.ErrNotExist}
		}
		// The live file was made between the two opens, and rotated
		// already: look again.
	}
	return nil, 0, fmt.Errorf("read events %s: the files were renamed at every look (%d)", path, steps)
}

// predecessor opens the file before f in the chain, or returns nil when f
// is the oldest left. f was at name number at, or later (it only moves to
// higher numbers). A rotation renames the oldest first, so mid-rotation
// the name just after f may be missing and its predecessor one further on;
// but only while f has not moved, which the final look checks.
func predecessor(path string, f *os.File, at int) (*os.File, int, error) {
	held, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("read events %s: %w", path, err)
	}
	for range steps {
		i, ok := locate(path, held, at)
		if !ok {
			return nil, 0, nil // rotated out of the chain since it was opened
		}
		at = i
		var prev *os.File
		pat := i + 1
		if prev, err = openAt(path, pat); prev == nil && err == nil {
			pat = i + 2
			prev, err = openAt(path, pat)
		}
		if err != nil {
			return nil, 0, err
		}
		if still, err := os.Lstat(name(path, i)); err == nil && os.SameFile(held, still) {
			return prev, pat, nil
		}
		if prev != nil {
			prev.Close()
		}
	}
	return nil, 0, fmt.Errorf("read events %s: the files were renamed at every look (%d)", path, steps)
}

// locate finds the name number, from, or after, of the file whose stat is
// held. Names are consecutive but for the one a rotation has just renamed
// away, so two missing in a row end the search.
func locate(path string, held os.FileInfo, from int) (int, bool) {
	for i, missing := from, 0; missing < 2; i++ {
		st, err := os.Lstat(name(path, i))
		if err != nil {
			missing++
			continue
		}
		missing = 0
		if os.SameFile(held, st) {
			return i, true
		}
	}
	return 0, false
}

// openAt opens the file named number i (0: the live one), or returns nil
// when there is none.
func openAt(path string, i int) (*os.File, error) {
	f, err := os.OpenFile(name(path, i), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return f, err
}

// name is the live file's name for 0, else the i-th rotated one's.
func name(path string, i int) string {
	if i == 0 {
		return path
	}
	return rotated(path, i)
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

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

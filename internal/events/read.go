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
			// The line not yet ended is read again, whole, next time:
			// it may be a write cut short (a full disk), which its
			// writer truncates away, and the next line is written
			// where it began.
			t.off -= int64(len(t.partial))
			t.partial = t.partial[:0]
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
// first, each the one before the next (walkBack).
func snapshot(path string) ([]*os.File, error) {
	files, _, err := walkBack(path, nil)
	return files, err
}

// walkBack opens the files of the chain newer than until (all of them when
// until is nil), oldest first; met says it came to until (or that until is
// nil). Writers rotate while it looks, and it holds no lock, so it never
// holds them back: it opens the newest file, then walks back one file at a
// time (predecessor). A rotated file never comes back to a name it left,
// files keep their order as they move (a rotation renames the oldest
// first), and the files it holds open cannot be replaced by a file with
// the same inode, so each step is checked by a look at where the two files
// it pairs still are. A step only has to beat one rotation, not the whole
// chain's listing, which rotations coming faster than a listing (tiny
// files, a disk where fsync is free) starved.
func walkBack(path string, until os.FileInfo) (files []*os.File, met bool, err error) {
	cur, st, at, err := openNewest(path)
	if err != nil {
		return nil, false, err
	}
	for { // files newest first until the end
		if until != nil && os.SameFile(until, st) {
			cur.Close()
			slices.Reverse(files)
			return files, true, nil
		}
		files = append(files, cur)
		prev, pst, pat, err := predecessor(path, cur, st, at)
		if err != nil {
			closeAll(files)
			return nil, false, err
		}
		if prev == nil {
			slices.Reverse(files)
			return files, until == nil, nil
		}
		cur, st, at = prev, pst, pat
	}
}

// steps bounds the tries of one step of the walk: each fails only when a
// rotation moved a file it looked at while it looked.
const steps = 1000

// openNewest opens the newest file of the chain: the live file, or,
// mid-rotation (renamed, its successor not yet made), the newest rotated
// one; at is where it was (0: the live file's name).
func openNewest(path string) (f *os.File, st os.FileInfo, at int, err error) {
	for range steps {
		f, st, at, ok, err := openNext(path, -1)
		switch {
		case err != nil:
			return nil, nil, 0, err
		case ok && f == nil:
			return nil, nil, 0, &os.PathError{Op: "read events", Path: path, Err: fs.ErrNotExist}
		case ok:
			return f, st, at, nil
		}
	}
	return nil, nil, 0, fmt.Errorf("read events %s: the files were renamed at every look (%d)", path, steps)
}

// predecessor opens the file before f (whose stat is held) in the chain,
// with its stat and name number, or returns nil when f is the oldest left.
// f was at name number at, or later (files only move to higher numbers).
// openNext opens the file after f's name; it is f's predecessor if f,
// looked at again, is still where it was.
func predecessor(path string, f *os.File, held os.FileInfo, at int) (*os.File, os.FileInfo, int, error) {
	for range steps {
		i, err := locate(path, f, held, at)
		if err != nil {
			return nil, nil, 0, err
		}
		if i < 0 {
			return nil, nil, 0, nil // rotated out of the chain since it was opened
		}
		at = i
		prev, pst, j, ok, err := openNext(path, i)
		if err != nil {
			return nil, nil, 0, err
		}
		if ok && isAt(path, i, held) {
			return prev, pst, j, nil // prev nil: none, f is the oldest
		}
		if prev != nil {
			prev.Close()
		}
	}
	return nil, nil, 0, fmt.Errorf("read events %s: the files were renamed at every look (%d)", path, steps)
}

// openNext opens the file of the first name after number i that is not
// empty (-1: the newest), with its stat and number. It is the next name's,
// or, mid-rotation (renamed on, the newer one not yet after it) or past a
// name a writer killed mid-rotation left empty, a later one's. ok says
// that, looked at again, the names between are still empty and the file is
// still where it was opened: a file between them would have had to pass it,
// or be seen. ok with no file: none after i.
func openNext(path string, i int) (f *os.File, st os.FileInfo, j int, ok bool, err error) {
	if j, err = nextName(path, i); err != nil || j < 0 {
		return nil, nil, 0, err == nil, err
	}
	if f, err = openAt(path, j); err != nil || f == nil {
		return nil, nil, 0, false, err
	}
	if st, err = f.Stat(); err == nil && emptyBetween(path, i, j) && isAt(path, j, st) {
		return f, st, j, true, nil
	}
	f.Close()
	return nil, nil, 0, false, nil
}

// locate finds the name number, from or after, of f (whose stat is held),
// or -1 when it has left the chain (rotated out). The names are probed in
// turn while they exist (a rotation leaves one empty at a time); past two
// empty ones, the directory is listed. f has left the chain when it has no
// link left, or when three listings in a row do not name it: rotated out
// but linked elsewhere (a backup's hard link), since a file found in none
// of them would have had to be renamed during each, three rotations that
// all left the files before it where they were.
func locate(path string, f *os.File, held os.FileInfo, from int) (int, error) {
	for i, empty := from, 0; empty < 2; i++ {
		st, err := os.Lstat(name(path, i))
		if err != nil {
			empty++
			continue
		}
		empty = 0
		if os.SameFile(held, st) {
			return i, nil
		}
	}
	now, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("read events %s: %w", path, err)
	}
	if st, ok := now.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		return -1, nil
	}
	for range 3 {
		nums, err := listed(path)
		if err != nil {
			return 0, err
		}
		for _, n := range nums {
			if n >= from && isAt(path, n, held) {
				return n, nil
			}
		}
	}
	return -1, nil
}

// nextName is the first name after number i that is not empty, -1 for none.
func nextName(path string, i int) (int, error) {
	for _, j := range []int{i + 1, i + 2} {
		if _, err := os.Lstat(name(path, j)); err == nil {
			return j, nil
		}
	}
	nums, err := listedTwice(path, i+1)
	if err != nil || len(nums) == 0 {
		return -1, err
	}
	return nums[0], nil
}

// emptyBetween reports whether the names after number i and before j are
// all empty, looked at in order: a file moving on while they are looked at
// moves to one looked at later.
func emptyBetween(path string, i, j int) bool {
	for k := i + 1; k < j; k++ {
		if _, err := os.Lstat(name(path, k)); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// isAt reports whether name number i is the file whose stat is held.
func isAt(path string, i int, held os.FileInfo) bool {
	st, err := os.Lstat(name(path, i))
	return err == nil && os.SameFile(held, st)
}

// listed is the numbers of the chain's names in the directory (0: the live
// file), lowest (newest) first. A name being renamed while
// it is read may be missing.
func listed(path string) ([]int, error) {
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
		if e.Name() == base {
			nums = append(nums, 0)
			continue
		}
		suffix, ok := strings.CutPrefix(e.Name(), base+".")
		if n, err := strconv.Atoi(suffix); ok && err == nil && n > 0 && strconv.Itoa(n) == suffix {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	return nums, nil
}

// listedTwice is listed's numbers from from on, listed again when there
// are none: a name being renamed may be missing from a listing (readdir
// may miss an entry renamed while it reads). Missing from both, the same
// files were renamed during each listing, and found nowhere nearer: two
// rotations, each killed before it reached the file the caller stands on
// (which it checks again), after killed ones had left names empty.
func listedTwice(path string, from int) ([]int, error) {
	for range 2 {
		nums, err := listed(path)
		if err != nil {
			return nil, err
		}
		if k, _ := slices.BinarySearch(nums, from); k < len(nums) {
			return nums[k:], nil
		}
	}
	return nil, nil
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

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

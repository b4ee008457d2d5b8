package events

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ErrFellBehind is returned by Follow when the file it was reading was
// rotated out of the chain (past path.Keep, deleted) before it got to the
// files after it: lines may be missing, and it says so rather than skip.
var ErrFellBehind = errors.New("fell behind: the file being read left the chain (rotated out, or removed) before the files after it were read; lines may be missing")

// Follow passes fn every event Read would return, then every event
// appended after, in file order, each once, across rotations, until ctx
// ends; it then returns ctx.Err(). fn runs on Follow's goroutine. Like
// Read it takes no lock and skips lines that do not parse, and a missing
// file is an error that errors.Is fs.ErrNotExist.
func Follow(ctx context.Context, path string, since time.Time, fn func(Event)) error {
	// Watch before the first read: a change made after it is queued.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("follow events %s: %w", path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("follow events %s: watch: %w", path, err)
	}
	files, err := snapshot(path)
	if err != nil {
		return err
	}
	cur, err := drainAllButLast(files, since, fn)
	if err != nil {
		return fmt.Errorf("follow events %s: %w", path, err)
	}
	defer func() {
		if cur != nil {
			cur.file.Close()
		}
	}()

	for {
		if err := cur.drain(since, fn); err != nil {
			return fmt.Errorf("follow events %s: %w", path, err)
		}
		if live, err := isLive(path, cur.file); err != nil {
			return fmt.Errorf("follow events %s: %w", path, err)
		} else if !live {
			// Renamed (rotated): the lines written before the rename are
			// all there now, and nothing is written to it after.
			if err := cur.drain(since, fn); err != nil {
				return fmt.Errorf("follow events %s: %w", path, err)
			}
			next, err := after(path, cur.file)
			if err != nil {
				return err
			}
			if len(next) > 0 { // else mid-rotation: the new live file is not there yet
				cur.file.Close()
				if cur, err = drainAllButLast(next, since, fn); err != nil {
					return fmt.Errorf("follow events %s: %w", path, err)
				}
				continue
			}
		}
		if err := wait(ctx, w, filepath.Base(path)); err != nil {
			return err
		}
	}
}

// drainAllButLast reads files (a chain, oldest first) but the last, which
// it returns to be followed; it closes the others.
func drainAllButLast(files []*os.File, since time.Time, fn func(Event)) (*tail, error) {
	last := files[len(files)-1]
	for i, f := range files[:len(files)-1] {
		err := (&tail{file: f}).drain(since, fn)
		f.Close()
		if err != nil {
			closeAll(files[i+1:])
			return nil, err
		}
	}
	return &tail{file: last}, nil
}

// isLive reports whether f is still the file at path.
func isLive(path string, f *os.File) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(held, now), nil
}

// after returns the files of the chain that came after f, oldest first.
func after(path string, f *os.File) ([]*os.File, error) {
	held, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("follow events %s: %w", path, err)
	}
	files, met, err := walkBack(path, held)
	if err != nil {
		return nil, err
	}
	if !met {
		closeAll(files)
		return nil, fmt.Errorf("follow events %s: %w", path, ErrFellBehind)
	}
	return files, nil
}

// wait returns when a file of the chain (a name starting with base)
// changed, or ctx ended. The directory is shared (the audit log, the
// state of the pod): other files' changes are not a reason to read.
func wait(ctx context.Context, w *fsnotify.Watcher, base string) error {
	for ours := false; !ours; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-w.Events:
			ours = strings.HasPrefix(filepath.Base(ev.Name), base)
		case err := <-w.Errors:
			// A queue overflow lost events, not lines: reading again is
			// enough. Anything else is the watch failing.
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				return fmt.Errorf("follow events: watch: %w", err)
			}
			ours = true
		}
	}
	// Many changes, one read.
	for {
		select {
		case <-w.Events:
		default:
			return nil
		}
	}
}

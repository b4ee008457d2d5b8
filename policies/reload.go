package policies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload builds a new generation from the source and swaps it in whole. A
// bundle that fails to load, verify or compile, or lacks a preset being
// served (RequirePreset), is rejected and logged; the
// last good generation keeps serving, or, with Options.Quarantine, a
// generation that denies everything takes over until a good bundle arrives.
func (e *Engine) Reload(ctx context.Context) error {
	e.reload.Lock()
	defer e.reload.Unlock()
	cur := e.gen.Load()
	g, err := e.load(ctx)
	if err == nil {
		err = e.lacksServed(g)
	}
	if err != nil {
		if e.opts.Quarantine {
			q := *cur
			q.quarantine = err
			e.gen.Store(&q)
			e.log.Error("policy reload rejected; engine quarantined, denying everything", "err", err, "policy", cur.hash)
		} else {
			e.log.Error("policy reload rejected; last good generation keeps serving", "err", err, "policy", cur.hash)
		}
		e.notify(cur.hash, err)
		return err
	}
	e.use(g)
	e.log.Info("policy generation active", "policy", g.hash, "previous", cur.hash, "origin", g.origin, "presets", g.presetNames())
	e.notify(g.hash, nil)
	return nil
}

func (e *Engine) notify(hash string, err error) {
	if e.opts.OnReload != nil {
		e.opts.OnReload(hash, err)
	}
}

// reloadDebounce collapses the burst of events an editor's save makes
// (write temp, rename, chmod) into one reload.
const reloadDebounce = 150 * time.Millisecond

// Watch reloads the bundle whenever a file under the source directory (or
// the tarball, or the lock file) changes, until ctx ends. It returns once
// the watches are in place, or with what kept them from being placed (an
// embedded bundle cannot change: an error too). The channel is closed when
// the watch ends; before that it carries why, when it ended before ctx did
// (its watcher closed), after which edits no longer reload.
func (e *Engine) Watch(ctx context.Context) (<-chan error, error) {
	if e.opts.Source.Path == "" {
		return nil, errors.New("policy watch: the embedded bundle cannot change")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("policy watch: %w", err)
	}
	// What the source is, a directory or a tarball, is read here, with
	// the watches placed: read by the goroutine, a directory renamed
	// away at once would be taken for neither, and its going missed.
	st, err := os.Stat(e.opts.Source.Path)
	rootDir := err == nil && st.IsDir()
	if err := e.addWatches(w); err != nil {
		w.Close()
		return nil, err
	}
	ended := make(chan error, 1)
	go func() {
		defer close(ended)
		defer w.Close()
		if err := e.watch(ctx, w, rootDir); err != nil {
			ended <- err
		}
	}()
	return ended, nil
}

// rewatchWait is how long a bundle directory replaced whole (renamed away,
// a new one put in its place: a common deploy) may take to be back before
// the watch ends.
var rewatchWait = 10 * time.Second // a variable for the tests

// watch reloads on the events of w until ctx ends. rootDir: the source is
// a directory, not a tarball.
func (e *Engine) watch(ctx context.Context, w *fsnotify.Watcher, rootDir bool) error {
	var timer <-chan time.Time
	root := filepath.Clean(e.opts.Source.Path)
	// A tarball is watched through its directory, which sees a new one
	// come; a directory's own watches stay on what it was once it is
	// renamed or removed. gone is when that happened: its watches are
	// placed again on what comes.
	var gone time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("policy watch: watcher closed")
			}
			if rootDir && ev.Name == root && ev.Has(fsnotify.Remove|fsnotify.Rename) && gone.IsZero() {
				gone = time.Now()
			}
			if ev.Has(fsnotify.Create) {
				// New subdirectories must be watched too; one gone
				// again before it is watched is no matter.
				if st, err := os.Stat(ev.Name); err == nil && st.IsDir() {
					if err := e.addWatches(w); err != nil && !errors.Is(err, fs.ErrNotExist) {
						return err
					}
				}
			}
			timer = time.After(reloadDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("policy watch: watcher closed")
			}
			e.log.Error("policy watch error", "err", err)
		case <-timer:
			timer = nil
			if !gone.IsZero() {
				// The old directories' watches go first: kept, each
				// would hold a kernel watch per deploy, and report its
				// old tree's edits under the live names.
				for _, p := range w.WatchList() {
					_ = w.Remove(p)
				}
				if err := e.addWatches(w); err != nil {
					if time.Since(gone) < rewatchWait {
						timer = time.After(reloadDebounce)
						continue
					}
					return fmt.Errorf("policy watch: %s went and is not back: %w", root, err)
				}
				gone = time.Time{}
			}
			_ = e.Reload(ctx) // logged and reported by Reload
		}
	}
}

// addWatches watches the source (every directory under it, or a tarball's
// directory) and the lock file's directory.
func (e *Engine) addWatches(w *fsnotify.Watcher) error {
	root := e.opts.Source.Path
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("policy watch: %w", err)
	}
	dirs := map[string]bool{}
	if st.IsDir() {
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs[p] = true
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("policy watch: %w", err)
		}
	} else {
		dirs[filepath.Dir(root)] = true
	}
	if lock, _ := e.lockPath(); lock != "" {
		dirs[filepath.Dir(lock)] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("policy watch %s: %w", d, err)
		}
	}
	return nil
}

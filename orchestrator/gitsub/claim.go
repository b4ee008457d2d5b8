package gitsub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrClaimed: another process (a sync spawn waiting for its runner, or
// another poll) is settling the task.
var ErrClaimed = errors.New("task is being settled by another process")

// Claim takes the task whose directory is dir for this process: an
// exclusive flock on dir/.claim, held until release (or this process's
// exit, so a crashed spawn frees its task). A sync spawn holds it from
// Start until its terminal ledger line, so Poll never settles a task twice;
// a claim held elsewhere is ErrClaimed, at once.
func Claim(dir string) (release func(), err error) { return claim(dir, false) }

// claim is Claim; with wait, a claim held elsewhere is waited for.
func claim(dir string, wait bool) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spawn directory: %w", err)
	}
	path := filepath.Join(dir, ".claim")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", path, err)
	}
	how := unix.LOCK_EX | unix.LOCK_NB
	if wait {
		how = unix.LOCK_EX
	}
	if err := flock(f, how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrClaimed)
		}
		return nil, fmt.Errorf("claim %s: flock: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// kept are the claims held until this process exits. Kept reachable: an
// *os.File nothing refers to is closed by its finalizer, and the lock
// would go with it at the next garbage collection.
var kept struct {
	sync.Mutex
	claims []func()
}

// keepUntilExit holds a claim for the rest of this process's life.
func keepUntilExit(release func()) {
	kept.Lock()
	defer kept.Unlock()
	kept.claims = append(kept.claims, release)
}

// flock is unix.Flock, again when a signal interrupts a wait.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

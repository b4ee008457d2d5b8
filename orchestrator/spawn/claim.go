package spawn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"golang.org/x/sys/unix"
)

// ErrClaimed: another process (a sync git spawn waiting for its runner, or
// another poll) is settling the task.
var ErrClaimed = errors.New("task is being settled by another process")

// Claim takes the task whose directory is dir for this process: an
// exclusive flock on dir/.claim, held until release (or this process's
// exit, so a crashed spawn frees its task). A sync git spawn holds it from
// Start until its terminal ledger line, and a reconciler settles a task
// only under it, so none is settled twice; a claim held elsewhere is
// ErrClaimed, at once.
func Claim(dir string) (release func(), err error) { return ClaimWait(dir, false) }

// ClaimWait is Claim; with wait, a claim held elsewhere is waited for.
func ClaimWait(dir string, wait bool) (release func(), err error) {
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
	if err := durable.Flock(f, how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrClaimed)
		}
		return nil, fmt.Errorf("claim %s: flock: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// Reconciled is one task a reconciler (spawn poll) settled.
type Reconciled struct {
	ID     string
	Status ledger.Status
	Exit   int
	Detail string
}

// ClaimIn claims task id for a reconciler and returns its ledger state
// read under the claim, when its status is still st: whoever held the
// claim before may have settled it. A nil task (and release) means there
// is nothing to do: another process holds the claim, or the task has
// moved on.
func ClaimIn(home orchestrator.Home, id string, st ledger.Status) (t *ledger.Task, release func(), err error) {
	release, err = Claim(home.Subagent(id))
	if errors.Is(err, ErrClaimed) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		release()
		return nil, nil, err
	}
	for _, ft := range ledger.Fold(entries) {
		if ft.ID == id && ft.Status == st {
			return &ft, release, nil
		}
	}
	release()
	return nil, nil, nil
}

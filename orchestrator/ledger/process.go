package ledger

import (
	"errors"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/procstat"
)

// Process names the `airlock spawn` process carrying a task, in its
// running line: its pid, its start time (clock ticks after boot) and the
// boot, so that a pid reused by another process, or after a reboot, is
// never taken for it. A reconciler ends a local task whose spawner is gone.
type Process struct {
	Pid   int    `json:"pid"`
	Start int64  `json:"start_ticks"`
	Boot  string `json:"boot_id"`
}

// Self is this process.
func Self() (*Process, error) {
	boot, err := procstat.BootID()
	if err != nil {
		return nil, fmt.Errorf("boot id: %w", err)
	}
	_, start, err := procstat.Stat(os.Getpid())
	if err != nil {
		return nil, err
	}
	return &Process{Pid: os.Getpid(), Start: start, Boot: boot}, nil
}

// Alive says whether p is still running: the same boot, a process at its
// pid that is no zombie and started when p did. An error means /proc could
// not say (the caller must not take it for gone).
func (p *Process) Alive() (bool, error) {
	boot, err := procstat.BootID()
	if err != nil {
		return false, fmt.Errorf("boot id: %w", err)
	}
	if boot != p.Boot {
		return false, nil
	}
	state, start, err := procstat.Stat(p.Pid)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !procstat.Dead(state) && start == p.Start, nil
}

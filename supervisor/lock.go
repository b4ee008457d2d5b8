package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"golang.org/x/sys/unix"
)

// lockDir holds one lock per pod name: a pod's name is its cgroup's, host-
// wide, so two pods of one name would remove each other's groups.
const lockDir = "/run/airlock"

// lockPod is the first boot step, before any side effect: an exclusive
// flock on the pod's name and on its state directory, held for the
// supervisor's life (the kernel drops it when the process dies, however).
// A second `airlock up` of a running pod must be refused here: later
// steps remove a stale cgroup of that name and write to its events file.
func (p *Pod) lockPod() error {
	if err := stateDir(p.m.StateDir); err != nil {
		return err
	}
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return err
	}
	for _, path := range []string{filepath.Join(lockDir, "pod-"+p.m.Name+".lock"), filepath.Join(p.m.StateDir, ".lock")} {
		if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return fmt.Errorf("pod lock: %w", err)
		}
		if err := durable.Flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			raw, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fmt.Errorf("pod %s is already running (pid %s holds %s): stop it first, or give this pod another name and state_dir", p.m.Name, strings.TrimSpace(string(raw)), path)
			}
			return fmt.Errorf("pod lock %s: %w", path, err)
		}
		f.Truncate(0)
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		p.cleanup = append(p.cleanup, func() { f.Close() })
	}
	return nil
}

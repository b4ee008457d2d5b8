// Package cgroup2 finds the cgroup v2 hierarchy and manages leaf groups in
// it: the sandbox launcher's per-sandbox leaf, and the proxy's connect hook
// and candidate list, are built on the same directories.
package cgroup2

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// ErrNoCgroup2 means no cgroup v2 hierarchy is mounted.
var ErrNoCgroup2 = errors.New("no cgroup v2 hierarchy mounted")

// Mount returns where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup on
// a unified system, /sys/fs/cgroup/unified on a hybrid one.
func Mount() (string, error) {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			return m.Point, nil
		}
	}
	return "", ErrNoCgroup2
}

// Path converts dir, a directory under the cgroup v2 mount
// (/sys/fs/cgroup/airlock-pod/agent, or under /sys/fs/cgroup/unified on a
// hybrid host), to the path /proc/<pid>/cgroup shows for its processes
// ("/airlock-pod/agent"), as the proxy's identity.Process.Cgroup holds it.
// It assumes the mount shows the hierarchy from the cgroup namespace's
// root, as a cgroup2 mount does.
func Path(dir string) (string, error) {
	mnt, err := Mount()
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(mnt, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("cgroup %s is not under the cgroup v2 mount %s", dir, mnt)
	}
	if rel == "." {
		return "/", nil
	}
	return "/" + rel, nil
}

// Create makes a group named name under parent (a cgroup v2 directory).
func Create(parent, name string) (string, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return dir, nil
}

// Add moves pid into the group.
func Add(dir string, pid int) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, dir, err)
	}
	return nil
}

// Remove deletes an empty group; its processes must have exited or moved.
// The kernel may still count a process that was just reaped (EBUSY for a
// moment): that is retried for up to a second.
func Remove(dir string) error {
	deadline := time.Now().Add(time.Second)
	for {
		err := os.Remove(dir)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Enter moves the calling process into a new group named name at the top of
// the hierarchy, so that a proxy can attribute its connections with the
// connect hook (benchmarks, soak tests). leave moves it back, kills what
// it started meanwhile and left there (a peer proxy's helpers that
// outlive it kept the bench's groups behind), and removes the group.
func Enter(name string) (dir string, leave func(), err error) {
	mnt, err := Mount()
	if err != nil {
		return "", nil, err
	}
	if dir, err = Create(mnt, name); err != nil {
		return "", nil, err
	}
	leave = func() {
		Add(mnt, os.Getpid())
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		Remove(dir)
	}
	if err := Add(dir, os.Getpid()); err != nil {
		Remove(dir)
		return "", nil, err
	}
	return dir, leave, nil
}

// EnableControllers enables controllers for dir's children (its
// cgroup.subtree_control), each on its own so that one the parent lacks
// does not keep the others off; the error names those that failed.
func EnableControllers(dir string, controllers ...string) error {
	var errs []error
	for _, c := range controllers {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
			errs = append(errs, fmt.Errorf("enable %s below %s: %w", c, dir, err))
		}
	}
	return errors.Join(errs...)
}

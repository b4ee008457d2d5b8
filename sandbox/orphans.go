package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A supervisor that is PID 1 (in a container) or a child subreaper
// inherits every orphan below it: processes of a sandbox whose init died
// are reparented to it. It must reap them, but never a child os/exec is
// waiting for, whose status would then be lost. The children this package
// starts are registered from before their start until their wait returns;
// ReapOrphans reaps only the others.
var managed = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// startManaged starts cmd as a registered child.
func startManaged(cmd *exec.Cmd) error {
	managed.Lock()
	defer managed.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	managed.pids[cmd.Process.Pid] = true
	return nil
}

// waitManaged waits for a registered child, then forgets it.
func waitManaged(cmd *exec.Cmd) error {
	err := cmd.Wait()
	managed.Lock()
	delete(managed.pids, cmd.Process.Pid)
	managed.Unlock()
	return err
}

// BecomeSubreaper makes orphans below this process its children rather
// than the host init's, so that ReapOrphans sees them. PID 1 is one
// already.
func BecomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_CHILD_SUBREAPER)", Err: err}
	}
	return nil
}

// ReapOrphans reaps this process's zombie children that it did not start
// through this package, and returns how many. Call it on SIGCHLD.
func ReapOrphans() int {
	managed.Lock()
	defer managed.Unlock()
	n := 0
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(raw)) {
			pid, err := strconv.Atoi(f)
			if err != nil || managed.pids[pid] {
				continue
			}
			var ws unix.WaitStatus
			if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
				n++
			}
		}
	}
	return n
}

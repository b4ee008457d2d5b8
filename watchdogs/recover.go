package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CommandRestart recovers a plain process with an operator's command, run
// by /bin/sh -c in its own process group. The process whose pid PidFile
// holds, if it still runs, is SIGKILLed first and waited for, so a hung
// instance never lingers beside the new one (or keeps its port).
type CommandRestart struct {
	Command string
	PidFile string        // optional
	Env     []string      // added to the watchdog's own environment
	Timeout time.Duration // bounds the command; its process group is killed past it
	// Output receives the command's stdout and stderr. A file, not a
	// pipe: a command that starts the shim in the background leaves it
	// holding these descriptors, and a pipe would block the wait on it.
	Output *os.File
}

// Recover implements Recoverer.
func (c CommandRestart) Recover(ctx context.Context, f Finding) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.PidFile != "" {
		if err := killPidFile(ctx, c.PidFile); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.Command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Stdout, cmd.Stderr = c.Output, c.Output
	if c.Env != nil {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("restart command %q: no exit within %v: its process group killed", c.Command, c.Timeout)
		}
		return fmt.Errorf("restart command %q: %w", c.Command, err)
	}
	return nil
}

// killPidFile SIGKILLs the process the file names and waits until it is
// gone (or a zombie: its sockets are closed then). A process already gone
// is fine, as is no pid file at all (it never started): the fault was
// found, the instance is what matters.
func killPidFile(ctx context.Context, path string) error {
	pid, err := readPidFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("pid file %s: kill(%d, SIGKILL): %w", path, pid, err)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !gone(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid file %s: process %d still there after SIGKILL: %w", path, pid, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// gone reports whether pid has exited: no /proc entry, or a zombie.
func gone(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

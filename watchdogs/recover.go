package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// CommandRestart recovers a plain process with an operator's command, run
// by /bin/sh -c in its own process group. The process whose pid PidFile
// holds, if it still runs (and the file can be trusted: see track), is
// SIGKILLed first and waited for, so a hung instance never lingers beside
// the new one (or keeps its port).
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
func (c CommandRestart) Recover(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.PidFile != "" {
		// Gone already (a dead process, a reused pid) is fine: the
		// fault was found, the instance is what matters.
		p, err := track(c.PidFile)
		switch {
		case errors.Is(err, ErrNoProcess):
		case err != nil:
			return err
		default:
			err = p.kill(ctx)
			p.close()
			if err != nil {
				return fmt.Errorf("pid file %s: %w", c.PidFile, err)
			}
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

package watchdogs

import (
	"context"
	"encoding/json"
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

// Recover implements Recoverer, with nothing remembered of the pid file
// (see PlainProcess, which does).
func (c CommandRestart) Recover(ctx context.Context) error {
	var rec pidRecord
	return c.recover(ctx, &rec)
}

// recover is Recover with rec, what an earlier round believed of the pid
// file (see track).
func (c CommandRestart) recover(ctx context.Context, rec *pidRecord) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.PidFile != "" {
		// Gone already (a dead process, a reused pid, a stale file) is
		// fine: the fault was found, the instance is what matters.
		p, err := track(c.PidFile, rec)
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

// PlainProcess is the probe and the recovery of a service no airlock pod
// runs (the shim's, with a restart command): its HTTP probe decides, and
// its command restarts it. Each probe also reads the pid file, so that the
// process it names is known while it runs: once that process is gone, a
// pid another process has taken since is told from it, and the restart
// goes on (see track) instead of failing on a file it cannot believe.
// A pid file naming no live process is the service dead, whatever answers
// its port: once the service is gone, any local user may listen there and
// keep the probe answered (and receive what the service's clients send).
type PlainProcess struct {
	Health  *HTTPProbe
	Restart CommandRestart

	pid pidRecord
}

// Probe implements Probe.
func (s *PlainProcess) Probe(ctx context.Context) Finding {
	f := s.Health.Probe(ctx)
	if s.Restart.PidFile == "" {
		return f
	}
	p, err := track(s.Restart.PidFile, &s.pid)
	switch {
	case err == nil:
		p.close()
	case errors.Is(err, ErrNoProcess):
		detail := fmt.Sprintf("%v, yet GET %s was answered: another process may hold its port", err, s.Health.URL)
		if f.Kind != "" {
			detail = fmt.Sprintf("%v; %s", err, f.Detail)
		}
		return Finding{Kind: s.Health.Dead, Detail: detail}
	}
	// A file not believed is no finding of its own: the health probe
	// decides, and the recovery reads the file again and says what is
	// wrong with it.
	return f
}

// Recover implements Recoverer.
func (s *PlainProcess) Recover(ctx context.Context) error {
	return s.Restart.recover(ctx, &s.pid)
}

// Restore implements Remembering.
func (s *PlainProcess) Restore(raw json.RawMessage) error {
	s.pid = pidRecord{}
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, &s.pid)
}

// Remember implements Remembering.
func (s *PlainProcess) Remember() (json.RawMessage, error) {
	if s.pid.Pid == 0 {
		return nil, nil
	}
	return json.Marshal(s.pid)
}

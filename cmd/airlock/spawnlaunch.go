package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/local"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// spawnLauncher launches a sub-agent's sandbox in the spawn's own process,
// as `airlock launch --preset` composes one (supervisor.Launch with its own
// proxy), served by the engine the spawn opened and verified: the bundle is
// compiled once, and the sandbox is decided by exactly the bundle whose
// hash the ledger records.
type spawnLauncher struct {
	engine *policies.Engine
	// proxy are the operator's proxy settings (CA, upstream CAs,
	// --resolve, limits, ...); each sandbox's audit log is its own.
	proxy proxy.Options
	log   *slog.Logger
}

// Launch starts s's command in a fresh sandbox with its own proxy. The
// sandbox dies with this process (its init's parent-death signal, and the
// leaf's reaper for its cgroups) however the process ends.
func (l spawnLauncher) Launch(ctx context.Context, s local.Spec) (_ local.Sandbox, err error) {
	if len(s.Command) == 0 {
		return nil, errors.New("no command to run")
	}
	// A preset the bundle lacks would make every decision a
	// policy_error: refused before anything is made.
	if err := l.engine.RequirePreset(s.Preset); err != nil {
		return nil, err
	}
	// As `airlock launch --preset` refuses it (handedSecret): this
	// process's proxy reads it from this process's environment.
	if preset, ok := l.engine.Preset(s.Preset); ok {
		if err := proxy.HandedSecret(preset, proxy.Gives("env", s.Env, s.Command[1:])); err != nil {
			return nil, err
		}
	}
	c := sandbox.Defaults()
	c.Command, c.CommandSHA256, c.Dir = s.Command, s.SHA256, s.Dir
	c.UID, c.GID = s.UID, s.GID
	c.ProxyPort = manifest.DefaultProxyPort
	c.RO, c.RW = append(c.RO, s.RO...), append(c.RW, s.RW...)
	c.Exec = append(c.Exec, s.Command[0])
	if err := c.Validate(); err != nil {
		return nil, err
	}
	log := l.log.With("sandbox", s.ID)
	warnHostAccount(c.UID, c.GID, log)

	sb := &spawnSandbox{log: log}
	defer func() {
		if err != nil {
			sb.release()
		}
	}()
	// The sub-agent's output is the operator's to read (0600): what it
	// prints may be what it was not meant to send anywhere. It writes
	// through the descriptors it inherits, never by path.
	if c.Stdout, err = sb.create(s.Stdout); err != nil {
		return nil, err
	}
	if c.Stderr, err = sb.create(s.Stderr); err != nil {
		return nil, err
	}
	// Made anew here; the proxy appends to it.
	audit, err := sb.create(s.Audit)
	if err != nil {
		return nil, err
	}
	audit.Close()
	po := l.proxy
	po.AuditLog, po.Logger = s.Audit, log
	p, err := proxy.Build(l.engine, po)
	if err != nil {
		return nil, err
	}
	sb.closers = append(sb.closers, func() { p.Close() })
	sb.sb, err = supervisor.Launch(ctx, supervisor.SandboxOptions{
		ID: s.ID, Config: c, Env: sandbox.EnvOptions{Set: s.Env}, Logger: log,
		Proxy: &supervisor.OwnProxy{Proxy: p, Engine: l.engine, Preset: s.Preset, Kind: s.Kind},
	})
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// spawnSandbox is a sub-agent's sandbox and what was opened for it, closed
// once it has ended.
type spawnSandbox struct {
	sb      *supervisor.Sandbox
	log     *slog.Logger
	closers []func()
}

// create opens path for the sandbox, 0600 and new: a file already there
// is not the sandbox's to append to.
func (s *spawnSandbox) create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { f.Close() })
	return f, nil
}

func (s *spawnSandbox) release() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Wait returns the command's exit code once every process of the sandbox
// is gone, its proxy drained and its cgroups removed.
func (s *spawnSandbox) Wait() (int, error) {
	out, err := s.sb.Wait()
	s.release()
	if out.CleanupErr != nil {
		s.log.Error("the sandbox's cgroups could not be removed", "err", out.CleanupErr)
	}
	if out.OOMKills > 0 {
		s.log.Warn(fmt.Sprintf("the kernel's OOM killer killed %d process(es) of the sandbox", out.OOMKills))
	}
	return out.ExitCode, err
}

// Stop sends SIGTERM to the command and, if it has not exited after
// grace, kills every process of the sandbox. It returns once the command
// has exited.
func (s *spawnSandbox) Stop(grace time.Duration) {
	select {
	case <-s.sb.Done():
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.sb.Shutdown(ctx); err != nil {
		s.log.Error("stop the sandbox", "err", err)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// podLaunchFlags are the flags `airlock launch --pod-socket` takes: what the
// command is and what it may touch, and cgroup limits below the pod's for
// its one-offs (the pod refuses higher ones). Everything else (its network,
// proxy, policy, CA, Landlock and seccomp modes, rlimits, cgroup) is the
// pod's to decide, and a flag that names it is refused rather than ignored.
var podLaunchFlags = map[string]bool{
	"pod-socket": true, "preset": true, "kind": true, "user": true, "ro": true, "rw": true, "env": true,
	"keep-env": true, "cwd": true, "sandbox-id": true, "stop-timeout": true, "json-status": true,
	"audit-log": true, "log-level": true, "memory-max": true, "pids-max": true,
	// A pin is checked by the pod against the bundle it serves (412), not
	// by loading one here.
	"policy-sha256": true,
}

// podLaunch is `airlock launch --pod-socket`'s request.
type podLaunch struct {
	socket, preset, kind, id, user, cwd, auditLog, jsonStatus, pin string
	ro, rw, envs, keepEnv                                          []string
	stopTimeout                                                    time.Duration
	memoryMax, pidsMax                                             int64
}

// checkPodFlags refuses every flag set that the pod decides (exit 2): a
// flag set and not taken by ours.
func checkPodFlags(fl *pflag.FlagSet, ours func(name string) bool) error {
	return refuseSetFlags(fl, ours, "with --pod-socket the pod decides this (its network, proxy, policy, CA, rlimits and cgroup); drop it, or run without --pod-socket")
}

// refuseSetFlags refuses the flags set (on the command line, or by their
// AIRLOCK_* variables, named) that are not ours, saying why: a flag that
// would be silently ignored is a setting the user believes in force.
func refuseSetFlags(fl *pflag.FlagSet, ours func(name string) bool, why string) error {
	var refused []string
	fl.Visit(func(f *pflag.Flag) {
		if !f.Changed || ours(f.Name) { // a default the command set itself is not the user's
			return
		}
		if env := knobOf(f); env != "" {
			refused = append(refused, "--"+f.Name+" (from "+env+" in the environment: unset it)")
			return
		}
		refused = append(refused, "--"+f.Name)
	})
	if len(refused) == 0 {
		return nil
	}
	sort.Strings(refused)
	return fmt.Errorf("%s: %s", strings.Join(refused, ", "), why)
}

// launchInPod runs args as a one-off sandbox of the running pod on
// o.socket, on this process's standard streams, and exits with the
// command's status. The pod's proxy decides its connections with o.preset:
// nothing here loads or compiles a policy.
func launchInPod(cmd *cobra.Command, o podLaunch, args []string, log *slog.Logger) error {
	usage := func(err error) error { return &exitError{ExitUsage, err} }
	if err := checkPodFlags(cmd.Flags(), func(name string) bool { return podLaunchFlags[name] }); err != nil {
		return usage(err)
	}
	if o.preset == "" {
		return usage(errors.New("--pod-socket needs --preset: the pod's proxy decides the sandbox's connections with it"))
	}
	if o.stopTimeout <= 0 {
		return usage(fmt.Errorf("--stop-timeout %v: want a positive duration", o.stopTimeout))
	}
	if err := checkLimitFlags(cmd, o.memoryMax, o.pidsMax); err != nil {
		return usage(err)
	}
	spec := adminclient.SandboxSpec{ID: o.id, Preset: o.preset, Kind: o.kind, Policy: o.pin, RO: o.ro, RW: o.rw,
		MemoryMax: o.memoryMax, PidsMax: o.pidsMax}
	if spec.ID == "" {
		spec.ID = fmt.Sprintf("launch-%d", os.Getpid())
	}
	var err error
	if spec.UID, spec.GID, err = sandbox.ParseUser(o.user); err != nil {
		return usage(err)
	}
	// The pod searches no PATH: the binary goes as this shell finds it.
	bin, err := exec.LookPath(args[0])
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return usage(fmt.Errorf("command %q: %w", args[0], err))
	}
	spec.Command = append([]string{bin}, args[1:]...)
	if spec.Dir = o.cwd; spec.Dir == "" {
		if spec.Dir, err = os.Getwd(); err != nil {
			return err
		}
	}
	if _, own := proxy.OwnDescriptor(o.auditLog); cmd.Flags().Changed("audit-log") && own {
		return usage(fmt.Errorf("--audit-log %s: with --pod-socket the pod writes a copy of the sandbox's lines to a FILE it creates; name one", o.auditLog))
	}
	for _, p := range []*string{&spec.Dir, &o.auditLog} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return usage(err)
			}
		}
	}
	if cmd.Flags().Changed("audit-log") {
		spec.Audit = o.auditLog // a copy of its lines, made by the pod
	}
	spec.Env = append(spec.Env, o.envs...)
	for _, k := range o.keepEnv {
		if v, ok := os.LookupEnv(k); ok {
			spec.Env = append(spec.Env, k+"="+v)
		}
	}
	status, err := openStatus(o.jsonStatus)
	if err != nil {
		return usage(err)
	}
	defer status.Close()
	// Signals from here on stop the sandbox: its command is not in this
	// terminal's foreground group, so nothing reaches it but the stop.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	// A stop signal while the pod sets the sandbox up ends the request,
	// and the pod, its launcher gone, ends a setup that hangs.
	stopped, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-sigs:
			close(stopped)
			cancel()
		case <-ctx.Done():
		}
	}()
	sb, err := adminclient.LaunchStdio(ctx, o.socket, spec, os.Stdin, os.Stdout, os.Stderr)
	cancel()
	<-watched
	select {
	case <-stopped:
		if err == nil {
			sb.Stop(o.stopTimeout) // the pod took it as the signal came
		} else {
			err = fmt.Errorf("stopped by a signal before the pod took the launch: %w", err)
		}
	default:
	}
	if err != nil {
		var se *adminclient.StatusError
		switch {
		case errors.As(err, &se) && se.Status == http.StatusBadRequest:
			return usage(err) // the pod's refusal of the spec: a preset it lacks, a limit above its own
		case errors.As(err, &se) && se.Status == http.StatusPreconditionFailed:
			// --policy-sha256 is not the bundle the pod serves.
			return &exitError{ExitIntegrity, fmt.Errorf("%w: %w", policies.ErrIntegrity, err)}
		}
		status.write(map[string]any{"started": false, "error": err.Error(), "exit_code": ExitLaunch}, log)
		return &exitError{ExitLaunch, err}
	}
	started := time.Now()
	go func() {
		for range sigs {
			sb.Stop(o.stopTimeout)
		}
	}()
	code, werr := sb.Wait()
	if werr != nil && code == 0 {
		code = ExitLaunch // the pod could not say how it ended
	}
	outcome := map[string]any{"started": werr == nil, "exit_code": code, "duration_ms": time.Since(started).Milliseconds()}
	if werr != nil {
		outcome["error"] = werr.Error()
	}
	status.write(outcome, log)
	if werr != nil {
		return &exitError{code, fmt.Errorf("pod %s: %w", o.socket, werr)}
	}
	if code != 0 {
		return &exitError{code, errSilent}
	}
	return nil
}

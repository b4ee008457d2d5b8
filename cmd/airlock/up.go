package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/spf13/cobra"
)

func newUpCmd() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:         "up [MANIFEST]",
		Short:       "Boot the pod a manifest describes (without one: the demo pod) and supervise it until SIGTERM or SIGINT",
		Annotations: serviceLogs,
		Args:        cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log := slog.Default()
			stderr := cmd.ErrOrStderr()
			// A pod's policy is its manifest's: a variable that pins or
			// names one would be believed and not read.
			for _, env := range policyKnobs() {
				if _, ok := os.LookupEnv(env); ok {
					return &exitError{ExitUsage, fmt.Errorf("%s is set: a pod's policy (bundle, pin, lock, key) is its manifest's policy: section; unset it", env)}
				}
			}
			var m *manifest.Pod
			var demo *demoPod
			var err error
			// A manifest's mistakes are reported first, root or not;
			// the demo is prepared (files, ports) only as root.
			if len(args) == 1 {
				if cmd.Flags().Changed("state-dir") {
					return &exitError{ExitUsage, errors.New("--state-dir is the demo pod's (no manifest): a manifest's pod keeps its state in its state_dir")}
				}
				if m, err = manifest.Load(args[0]); err != nil {
					return &exitError{ExitUsage, err}
				}
			}
			if os.Geteuid() != 0 {
				return notRoot(stderr)
			}
			if len(args) == 1 {
				// Run as root, the pod does what the manifest says (its
				// allowed ranges, bundle, keys): said when another user
				// could change it (watchdog install refuses such a one).
				if err := trusted.Path(args[0]); errors.Is(err, trusted.ErrUntrusted) {
					log.Warn("the manifest could be changed by another user, and the pod, run as root, does what it says: chown it (and its directories) to root, chmod go-w", "manifest", args[0], "err", err.Error())
				}
			}
			if m == nil {
				if demo, err = newDemoPod(stateDir, log); err != nil {
					return err
				}
				defer demo.Close()
				m = demo.manifest
			}
			stopReaping := reapOrphans(log)
			defer stopReaping()

			// A stop signal during boot ends the boot; after it, the pod.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// A second one during the boot's stop kills what it started.
			stopNow, killNow := context.WithCancel(context.Background())
			booted := make(chan struct{})
			go func() {
				select {
				case <-ctx.Done():
				case <-booted:
					return
				}
				again, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
				defer cancel()
				select {
				case <-again.Done():
					killNow()
				case <-booted:
				}
			}()
			pod, err := supervisor.Up(ctx, m, supervisor.Options{Logger: log, Output: stderr, StopNow: stopNow})
			close(booted) // the stop after READY has its own second signal
			switch {
			case errors.Is(err, supervisor.ErrStopped):
				fmt.Fprintln(stderr, "airlock: stopped during boot")
				return nil
			case errors.Is(err, policies.ErrIntegrity):
				return &exitError{ExitIntegrity, err}
			case err != nil:
				return err
			}
			st := pod.Status()
			fmt.Fprintf(stderr, "airlock: pod %s READY (policy %s)\n  boot:", st.Pod, st.Policy)
			var total time.Duration
			for _, s := range st.Boot {
				fmt.Fprintf(stderr, " %s %v ·", s.Name, s.Duration.Round(10*time.Microsecond))
				total += s.Duration
			}
			fmt.Fprintf(stderr, " READY after %v\n", total.Round(time.Millisecond))
			for _, r := range st.Ingress {
				fmt.Fprintf(stderr, "  ingress %s: http://%s → %s:%d\n", r.Name, r.Listen, r.Service, r.Port)
			}
			fmt.Fprintf(stderr, "  events: %s\n  audit:  %s\n  admin:  %s\n", st.Events, st.Audit, m.Admin.Socket)
			if demo != nil {
				demo.show(ctx, stderr, pod)
			}
			var failed error
			select {
			case <-ctx.Done():
			case <-pod.Failed():
				failed = errors.New("the pod failed: " + pod.Failure())
			}
			fmt.Fprintln(stderr, "airlock: stopping the pod")
			// A second stop signal kills what is still running.
			now, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer cancel()
			pod.Stop(now)
			return failed
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", "/var/lib/airlock/demo", "the demo pod's state `DIR` (without a manifest)")
	return cmd
}

// notRoot says what the pod needs and would do: it is not a degraded mode.
func notRoot(w io.Writer) error {
	fmt.Fprintln(w, `airlock up needs root. It would:
  - verify the policy bundle against its pin, and compile it;
  - create the pod's network namespace, whose only way out is the proxy listening inside it;
  - create a cgroup for the pod and one per service (memory and pids limits, cgroup.kill);
  - launch each service as its unprivileged uid with no capabilities, no_new_privs, Landlock and seccomp;
  - serve ingress routes behind per-operator API keys, and the admin API on a unix socket.
Run it as root (sudo airlock up), or under systemd as a root service.`)
	return &exitError{ExitError, errSilent}
}

// reapOrphans makes the supervisor a child subreaper (PID 1 in a container
// is one already) and reaps the orphans reparented to it, which would
// otherwise stay zombies.
func reapOrphans(log *slog.Logger) func() {
	if err := sandbox.BecomeSubreaper(); err != nil {
		log.Warn("orphans of the services are reaped by the host's init instead", "err", err)
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-chld:
				sandbox.ReapOrphans()
			}
		}
	}()
	return func() { signal.Stop(chld); cancel() }
}

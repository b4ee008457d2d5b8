package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/watchdogs"
	"github.com/spf13/cobra"
)

// shimFlags are `airlock watchdog shim`'s flags.
type shimFlags struct {
	url, service, adminSocket, restartCmd, pidFile, state, inbox string
	probeTimeout, restartTimeout, settle, window, interval       time.Duration
	hungAfter, maxRestarts                                       int
	once                                                         bool
}

// check refuses a command line that cannot make a working watchdog, before
// anything is opened.
func (f *shimFlags) check() error {
	u, err := url.Parse(f.url)
	switch {
	case f.once == (f.interval != 0):
		return errors.New("give exactly one of --once (for a timer) and --interval (a daemon)")
	case f.once && f.state == "":
		return errors.New("--once needs --state: the timeouts in a row and the restarts in the window are counted across runs")
	case (f.adminSocket == "") == (f.restartCmd == ""):
		return errors.New("give exactly one of --admin-socket (the pod is airlock's) and --restart-cmd (a plain process)")
	case f.pidFile != "" && f.restartCmd == "":
		return errors.New("--pid-file goes with --restart-cmd: the supervisor kills its own hung instance")
	case f.inbox == "":
		return errors.New("--inbox is required: the events file the watchdog reports into (the pod's agent-inbox.jsonl)")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("--url %q: want http://HOST:PORT/v1/models", f.url)
	case f.interval < 0 || f.probeTimeout <= 0 || f.restartTimeout <= 0 || f.settle <= 0 || f.window <= 0:
		return errors.New("--interval, --probe-timeout, --restart-timeout, --settle and --window must be positive")
	case f.hungAfter < 1 || f.maxRestarts < 1:
		return errors.New("--hung-after and --max-restarts must be at least 1")
	}
	return nil
}

func newWatchdogShimCmd() *cobra.Command {
	var f shimFlags
	cmd := &cobra.Command{
		Use:   "shim",
		Short: "Probe the model shim; restart it when it is dead or hung, within a budget",
		Long: `Probes the model shim (GET /v1/models) and replaces it when it is dead (no
connection) or hung (--hung-after probe timeouts in a row: a stopped process
still accepts connections). It restarts through the pod's admin socket when
the pod is airlock's, or with --restart-cmd (run by /bin/sh -c) otherwise;
for a hung plain process, the pid in --pid-file is SIGKILLed first. Past
--max-restarts in --window it gives up with a critical line. Every finding
and restart is one line in --inbox (source watchdog-shim).

Exit status with --once: 0 when the shim is healthy, suspect or recovered,
1 when it is not (a failed restart, or given up).`,
		Args:        cobra.NoArgs,
		Annotations: serviceLogs, // a daemon, or a timer's run: its log is the journal's
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return &exitError{ExitUsage, err}
			}
			return runShimWatchdog(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "http://127.0.0.1:8901/v1/models", "the shim's model list `URL`")
	fl.DurationVar(&f.probeTimeout, "probe-timeout", 2*time.Second, "a probe with no answer within this long is a timeout")
	fl.IntVar(&f.hungAfter, "hung-after", 3, "`N` probe timeouts in a row make the shim hung")
	fl.StringVar(&f.service, "service", "shim", "the shim's service `NAME` in the pod (and in the inbox lines)")
	fl.StringVar(&f.adminSocket, "admin-socket", "", "`PATH` of the pod's admin socket: restart through the supervisor")
	fl.StringVar(&f.restartCmd, "restart-cmd", "", "`COMMAND` (for /bin/sh -c) that starts a new shim, for a shim no airlock pod runs")
	fl.StringVar(&f.pidFile, "pid-file", "", "`PATH` of the file holding the shim's pid, SIGKILLed before a hung shim's restart")
	fl.DurationVar(&f.restartTimeout, "restart-timeout", 30*time.Second, "the restart command or request may take this long")
	fl.DurationVar(&f.settle, "settle", 30*time.Second, "after a restart, the shim must answer within this long, or the restart failed")
	fl.IntVar(&f.maxRestarts, "max-restarts", watchdogs.DefaultMaxRestarts, "at most `N` restarts in --window, then give up")
	fl.DurationVar(&f.window, "window", watchdogs.DefaultWindow, "the budget's window")
	fl.BoolVar(&f.once, "once", false, "probe once (and recover) and exit: for a timer")
	fl.DurationVar(&f.interval, "interval", 0, "run as a daemon, probing every `D`")
	fl.StringVar(&f.state, "state", "", "`PATH` of the state file (timeouts in a row, restart times), written atomically; required with --once")
	fl.StringVar(&f.inbox, "inbox", "", "`PATH` of the events file to report into (the pod's agent-inbox.jsonl)")
	return cmd
}

func runShimWatchdog(cmd *cobra.Command, f *shimFlags) error {
	inbox, err := events.Open(f.inbox, events.Options{})
	if err != nil {
		return err
	}
	defer inbox.Close()
	w := &watchdogs.Watchdog{
		Source: "watchdog-shim", Service: f.service,
		Probe:          watchdogs.NewShimProbe(f.url, f.probeTimeout),
		Budget:         watchdogs.Budget{Max: f.maxRestarts, Window: f.window},
		StrikesToFault: f.hungAfter,
		Settle:         f.settle,
		StatePath:      f.state,
		Inbox:          inbox,
		Log:            slog.Default(),
	}
	if f.adminSocket != "" {
		w.Recover = watchdogs.AdminRestart{Socket: f.adminSocket, Service: f.service, Timeout: f.restartTimeout}
	} else {
		// The command's output goes to our stderr when that is a file
		// (a terminal, the journal); a pipe would be held open by the
		// shim it leaves running.
		out, _ := cmd.ErrOrStderr().(*os.File)
		w.Recover = watchdogs.CommandRestart{Command: f.restartCmd, PidFile: f.pidFile, Timeout: f.restartTimeout, Output: out}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !f.once {
		return w.Run(ctx, f.interval)
	}
	res, err := w.Once(ctx)
	if err != nil {
		return err
	}
	switch res.Outcome {
	case watchdogs.Failed, watchdogs.GaveUp:
		return fmt.Errorf("%s %s: %s", f.service, res.Outcome, res.Detail)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", f.service, res.Outcome)
	return nil
}

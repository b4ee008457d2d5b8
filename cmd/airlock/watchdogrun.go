package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/airlock-sandbox/airlock/watchdogs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runFlags are the flags every watchdog command shares: how it runs (one
// round for a timer, or a daemon), where it remembers and reports, its
// budget, and how it acts (on an airlock pod, or on a plain process).
type runFlags struct {
	service, adminSocket, restartCmd, pidFile, state, inbox string
	metrics, textfile                                       string
	probeTimeout, restartTimeout, settle, window, interval  time.Duration
	hungAfter, maxRestarts                                  int
	once                                                    bool
}

func (r *runFlags) add(fl *pflag.FlagSet, service string) {
	fl.DurationVar(&r.probeTimeout, "probe-timeout", 2*time.Second, "a probe with no answer within this long is a timeout")
	fl.IntVar(&r.hungAfter, "hung-after", 3, "`N` probe timeouts in a row make the "+service+" hung")
	fl.StringVar(&r.service, "service", service, "the "+service+"'s service `NAME` in the pod (and in the inbox lines)")
	fl.StringVar(&r.adminSocket, "admin-socket", "", "`PATH` of the pod's admin socket: act through the supervisor")
	fl.StringVar(&r.restartCmd, "restart-cmd", "", "`COMMAND` (for /bin/sh -c) that starts a new "+service+", for one no airlock pod runs")
	fl.StringVar(&r.pidFile, "pid-file", "", "`PATH` of the file holding the "+service+"'s pid, SIGKILLed before it is replaced")
	fl.DurationVar(&r.restartTimeout, "restart-timeout", 30*time.Second, "the restart command or request may take this long")
	fl.DurationVar(&r.settle, "settle", 30*time.Second, "after a restart, the "+service+" must answer within this long, or the restart failed")
	fl.IntVar(&r.maxRestarts, "max-restarts", watchdogs.DefaultMaxRestarts, "at most `N` restarts in --window, then give up")
	fl.DurationVar(&r.window, "window", watchdogs.DefaultWindow, "the budget's window")
	fl.BoolVar(&r.once, "once", false, "probe once (and recover) and exit: for a timer")
	fl.DurationVar(&r.interval, "interval", 0, "run as a daemon, probing every `D`")
	fl.StringVar(&r.state, "state", "", "`PATH` of the state file (timeouts in a row, restart times), written atomically; required with --once")
	fl.StringVar(&r.inbox, "inbox", "", "`PATH` of the events file to report into (the pod's agent-inbox.jsonl)")
	fl.StringVar(&r.metrics, "metrics", "", "serve Prometheus metrics on GET /metrics at `ADDR` (a loopback 127.0.0.1:PORT: no authentication); with --interval only")
	fl.StringVar(&r.textfile, "textfile", "", "after the round, write the metrics to `PATH` (a .prom file in node_exporter's textfile directory), their counters kept in --state; with --once only")
}

// check refuses a command line that cannot make a working watchdog, before
// anything is opened.
func (r *runFlags) check() error {
	switch {
	case r.once == (r.interval != 0):
		return errors.New("give exactly one of --once (for a timer) and --interval (a daemon)")
	case r.once && r.state == "":
		return errors.New("--once needs --state: the timeouts in a row and the restarts in the window are counted across runs")
	case (r.adminSocket == "") == (r.restartCmd == ""):
		return errors.New("give exactly one of --admin-socket (the pod is airlock's) and --restart-cmd (a plain process)")
	case r.pidFile != "" && r.restartCmd == "":
		return errors.New("--pid-file goes with --restart-cmd: the supervisor kills its own instances")
	case r.inbox == "":
		return errors.New("--inbox is required: the events file the watchdog reports into (the pod's agent-inbox.jsonl)")
	case r.metrics != "" && r.once:
		return errors.New("--metrics is a daemon's (--interval): a --once run is gone before a scrape; write --textfile for node_exporter instead")
	case r.textfile != "" && !r.once:
		return errors.New("--textfile is for --once (a timer's run): a daemon serves --metrics")
	case r.textfile != "" && !strings.HasSuffix(r.textfile, ".prom"):
		return fmt.Errorf("--textfile %q: node_exporter's textfile collector reads only *.prom files", r.textfile)
	case r.interval < 0 || r.probeTimeout <= 0 || r.restartTimeout <= 0 || r.settle <= 0 || r.window <= 0:
		return errors.New("--interval, --probe-timeout, --restart-timeout, --settle and --window must be positive")
	case r.hungAfter < 1 || r.maxRestarts < 1:
		return errors.New("--hung-after and --max-restarts must be at least 1")
	}
	if r.metrics != "" {
		return checkLoopbackAddr("--metrics", r.metrics)
	}
	return nil
}

// checkLoopbackAddr keeps a listener with no authentication on loopback,
// as the manifest's admin.http is kept.
func checkLoopbackAddr(flag, addr string) error {
	if why := manifest.CheckLoopback(addr); why != "" {
		return fmt.Errorf("%s %q: %s", flag, addr, why)
	}
	return nil
}

// runWatchdog completes w with what the flags say (inbox, state, budget,
// metrics) and runs it: one round with --once, else rounds every
// --interval until SIGINT or SIGTERM.
func runWatchdog(cmd *cobra.Command, w *watchdogs.Watchdog, r *runFlags) error {
	var m *watchdogs.Metrics
	if r.metrics != "" || r.textfile != "" {
		m = watchdogs.NewMetrics(w.Source, r.service)
		w.Observe = m.Observe
	}
	if r.metrics != "" {
		// Listening first: a daemon that cannot serve its metrics
		// fails at its start, not silently later.
		_, stop, err := serveMetrics(r.metrics, m.Handler())
		if err != nil {
			return err
		}
		defer stop()
	}
	inbox, err := events.Open(r.inbox, events.Options{})
	if err != nil {
		return err
	}
	defer inbox.Close()
	w.Service, w.Inbox, w.StatePath, w.Log = r.service, inbox, r.state, slog.Default()
	w.Budget = watchdogs.Budget{Max: r.maxRestarts, Window: r.window}
	w.StrikesToFault, w.Settle = r.hungAfter, r.settle
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !r.once {
		return w.Run(ctx, r.interval)
	}
	res, err := w.Once(ctx)
	if errors.Is(err, watchdogs.ErrBusy) {
		// No round, so no textfile either: the run under way writes it,
		// and one of this run's would count from nothing.
		return &exitError{watchdogs.ExitBusy, err}
	}
	if ctx.Err() != nil {
		// Stopped (SIGTERM, a timer's timeout): the round found nothing
		// and says nothing; the textfile keeps the last real round's.
		return nil
	}
	if r.textfile != "" {
		err = errors.Join(err, m.WriteTextfile(r.textfile))
	}
	if err != nil {
		return err
	}
	switch res.Outcome {
	case watchdogs.Failed, watchdogs.GaveUp, watchdogs.Blind:
		return fmt.Errorf("%s %s: %s", r.service, res.Outcome, res.Detail)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", r.service, res.Outcome)
	return nil
}

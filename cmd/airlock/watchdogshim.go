package main

import (
	"fmt"
	"net/url"
	"os"

	"github.com/airlock-sandbox/airlock/watchdogs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// shimFlags are `airlock watchdog shim`'s flags.
type shimFlags struct {
	runFlags
	url string
}

func (f *shimFlags) check() error {
	if err := f.runFlags.check(); err != nil {
		return err
	}
	if err := checkURL("--url", f.url); err != nil {
		return fmt.Errorf("%w: want http://HOST:PORT/v1/models", err)
	}
	return nil
}

// checkURL refuses a probe URL that is not http(s)://HOST[:PORT]/...
func checkURL(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q", flag, raw)
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
1 when it is not (a failed restart, given up, or blind: the watchdog could
not look), or when its state file cannot be read (a critical state_unreadable
line, once); 75 when another run on the same --state is under way (this one
does nothing), 1 when one has been for over 30 minutes (a critical
watchdog_stuck line).`,
		Args:        cobra.NoArgs,
		Annotations: serviceLogs, // a daemon, or a timer's run: its log is the journal's
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return &exitError{ExitUsage, err}
			}
			return runShimWatchdog(cmd, &f)
		},
	}
	f.add(cmd.Flags())
	return cmd
}

func (f *shimFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.url, "url", "http://127.0.0.1:8901/v1/models", "the shim's model list `URL`")
	f.runFlags.add(fl, "shim")
}

func runShimWatchdog(cmd *cobra.Command, f *shimFlags) error {
	w := &watchdogs.Watchdog{Source: "watchdog-shim"}
	if f.adminSocket != "" {
		// The shim listens on the pod's own loopback.
		pod := watchdogs.PodTarget{Socket: f.adminSocket, Service: f.service, Timeout: f.restartTimeout}
		w.Probe = watchdogs.NewHTTPProbe(f.url, f.probeTimeout, watchdogs.KindShimDead, watchdogs.KindShimHung, pod.Dial)
		w.Recover = pod
	} else {
		// Its probe reads the pid file too, while the shim runs: what
		// it learns then tells a pid taken since from the shim's.
		p := &watchdogs.PlainProcess{
			Health:  watchdogs.NewHTTPProbe(f.url, f.probeTimeout, watchdogs.KindShimDead, watchdogs.KindShimHung, nil),
			Restart: watchdogs.CommandRestart{Command: f.restartCmd, PidFile: f.pidFile, Timeout: f.restartTimeout, Output: commandOutput(cmd)},
		}
		w.Probe, w.Recover = p, p
	}
	return runWatchdog(cmd, w, &f.runFlags)
}

// commandOutput is where a restart command's output goes: our stderr when
// that is a file (a terminal, the journal); a pipe would be held open by
// the process it leaves running.
func commandOutput(cmd *cobra.Command) *os.File {
	out, _ := cmd.ErrOrStderr().(*os.File)
	return out
}

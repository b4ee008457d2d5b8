package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/airlock-sandbox/airlock/watchdogs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newWatchdogCmd is the host-side watchdogs' group: each watchdog, and
// the units that run them.
func newWatchdogCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watchdog",
		Short: "Host-side watchdogs that recover the gateway and the shim, and their units",
	}
	cmd.AddCommand(newWatchdogInstallCmd(), newWatchdogShimCmd(), newWatchdogGatewayCmd())
	return cmd
}

func newWatchdogInstallCmd() *cobra.Command {
	var systemd, launchd, force bool
	var dir, airlockPath, manifestPath, logDir string
	var only []string
	var podWatchdog time.Duration
	cmd := &cobra.Command{
		Use:   "install --systemd|--launchd [--dir DIR] [-- WATCHDOG-ARGS...]",
		Short: "Write the units that run the watchdogs every 5 minutes (and, on systemd, the pod)",
		Long: `Write, for each watchdog (gateway and shim, or those --watchdog names), the
units that run "airlock watchdog NAME --once --state FILE WATCHDOG-ARGS..."
every 5 minutes: a systemd service and timer, or a launchd plist. The state
file is under /var/lib/airlock (systemd) or ~/Library/Application Support/airlock
(launchd). On systemd it writes the pod's own
unit too, airlock-pod.service (Type=notify, WatchdogSec, Restart=on-failure).
The arguments after -- are checked as each watchdog's command checks them
(--once and --state are the unit's own); with --restart-cmd the watchdogs
watch a plain process, and no pod unit is written.
A file already there with other content is refused, unless --force.`,
		Example: `  sudo airlock watchdog install --systemd --manifest /etc/airlock/pod.yaml -- \
    --admin-socket /var/lib/airlock/pod/admin.sock --inbox /var/lib/airlock/pod/agent-inbox.jsonl
  sudo systemctl daemon-reload
  sudo systemctl enable --now airlock-pod.service airlock-watchdog-gateway.timer airlock-watchdog-shim.timer`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return fmt.Errorf("the watchdogs' arguments come after --: %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(format string, a ...any) error {
				return &exitError{ExitUsage, fmt.Errorf(format+" (see airlock watchdog install --help)", a...)}
			}
			if systemd == launchd {
				return usage("say which init system: --systemd or --launchd")
			}
			set := cmd.Flags().Changed
			switch {
			case podWatchdog <= 0:
				return usage("--pod-watchdog %v: want a positive duration", podWatchdog)
			case launchd && (set("manifest") || set("pod-watchdog")):
				return usage("--manifest and --pod-watchdog are for the pod's systemd unit; launchd gets no pod (airlock up needs Linux)")
			case systemd && set("log-dir"):
				return usage("--log-dir is for launchd; systemd's journal keeps the watchdogs' output")
			}
			for _, w := range only {
				if !slices.Contains(watchdogs.Watched, w) {
					return usage("--watchdog %q: there are %s", w, strings.Join(watchdogs.Watched, " and "))
				}
			}
			for flag, p := range map[string]string{"--dir": dir, "--airlock": airlockPath, "--log-dir": logDir} {
				if p != "" && !filepath.IsAbs(p) {
					return usage("%s %q: want an absolute path", flag, p)
				}
			}
			u := watchdogs.Units{Airlock: airlockPath, PodWatchdog: podWatchdog, LogDir: logDir, Args: args, Watchdogs: only}
			if u.Airlock == "" {
				exe, err := thisExecutable()
				if err != nil {
					return err
				}
				u.Airlock = exe
			}
			u.StopGrace = manifest.DefaultStopGrace // the demo pod's
			if manifestPath != "" {
				abs, err := filepath.Abs(manifestPath)
				if err != nil {
					return err
				}
				// A manifest the pod could not boot is refused now, not
				// at the unit's first start.
				m, err := manifest.Load(abs)
				if err != nil {
					return &exitError{ExitUsage, err}
				}
				u.Manifest, u.StopGrace = abs, m.StopGrace
			}
			// The units run the binary, which reads the manifest, as
			// root (systemd) or as this user (launchd), at every start:
			// a file another user could replace would be theirs to run.
			for _, f := range []struct{ what, path string }{{"the airlock binary (--airlock)", u.Airlock}, {"the manifest", u.Manifest}} {
				if f.path == "" {
					continue
				}
				if err := trusted.Path(f.path); err != nil {
					return usage("%s: %v; the units would run what another user can change: chown it (and its directories) to root, chmod go-w", f.what, err)
				}
			}
			if systemd {
				if dir == "" {
					dir = "/etc/systemd/system"
				}
				u.StateDir = "/var/lib/airlock"
			} else {
				home, herr := os.UserHomeDir()
				if herr != nil {
					return fmt.Errorf("launchd's state directory is under the home directory: %w", herr)
				}
				if dir == "" {
					dir = filepath.Join(home, "Library", "LaunchAgents")
				}
				if u.LogDir == "" {
					u.LogDir = filepath.Join(home, "Library", "Logs", "airlock")
				}
				u.StateDir = filepath.Join(home, "Library", "Application Support", "airlock")
			}
			// A unit whose command line the watchdog refuses would
			// fail every 5 minutes, quietly: refused now instead.
			plain, err := checkUnitArgs(u)
			if err != nil {
				return usage("%v", err)
			}
			if plain && systemd {
				// Watching a plain process (--restart-cmd): no pod
				// of airlock's to run.
				if set("manifest") || set("pod-watchdog") {
					return usage("--manifest and --pod-watchdog are for airlock-pod.service; the watchdogs' --restart-cmd says they watch a plain process, not an airlock pod")
				}
				u.NoPod = true
			}
			var files []watchdogs.File
			if systemd {
				files, err = u.Systemd()
			} else {
				files, err = u.Launchd()
			}
			if err != nil {
				return err
			}
			if launchd {
				// launchd opens the log files but does not make their
				// directory.
				if err := os.MkdirAll(u.LogDir, 0o755); err != nil {
					return fmt.Errorf("the watchdogs' log directory: %w", err)
				}
			}
			written, err := watchdogs.Install(dir, files, force)
			w := cmd.OutOrStdout()
			for _, f := range written {
				state := "wrote"
				if !f.Changed {
					state = "unchanged"
				}
				fmt.Fprintf(w, "%-9s %s\n", state, f.Path)
			}
			if err != nil {
				return err
			}
			if launchd {
				for _, f := range written {
					fmt.Fprintf(w, "load it with: launchctl load -w %s\n", f.Path)
				}
				return nil
			}
			enable := ""
			for _, f := range written {
				if name := filepath.Base(f.Path); name == watchdogs.PodUnit || strings.HasSuffix(name, ".timer") {
					enable += " " + name
				}
			}
			fmt.Fprintln(w, "load them with: systemctl daemon-reload && systemctl enable --now"+enable)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&systemd, "systemd", false, "write systemd units: a service and a timer per watchdog, and airlock-pod.service")
	f.BoolVar(&launchd, "launchd", false, "write a launchd plist per watchdog")
	f.StringVar(&dir, "dir", "", "write the units into `DIR`, absolute (default: /etc/systemd/system, or ~/Library/LaunchAgents)")
	f.StringSliceVar(&only, "watchdog", nil, "write units for watchdog `NAME` only (gateway, shim; repeatable; default: both): watchdogs of plain processes take different arguments")
	f.BoolVar(&force, "force", false, "replace a unit already there with other content")
	f.StringVar(&airlockPath, "airlock", "", "the airlock binary the units run, absolute `FILE` (default: this one)")
	f.StringVar(&manifestPath, "manifest", "", "the pod's manifest `FILE` for airlock-pod.service (default: none, the demo pod); checked now")
	f.DurationVar(&podWatchdog, "pod-watchdog", watchdogs.DefaultPodWatchdog, "airlock-pod.service's WatchdogSec=: above the longest recovery of a service you accept without restarting the pod")
	f.StringVar(&logDir, "log-dir", "", "launchd: the watchdogs' log `DIR`, absolute (default: ~/Library/Logs/airlock)")
	return cmd
}

// unitOwn are the flags of a watchdog's command line that the unit sets
// itself (watchdogs.Units runs `airlock watchdog NAME --once --state
// FILE ARGS...`), and --interval, which would make its one-shot run a
// daemon: given again after --, each would override the unit's (two
// watchdogs sharing one state file), or make a unit that never runs.
var unitOwn = []string{"once", "state", "interval"}

// oneWatchdogs are the flags naming what one watchdog watches, or writes:
// given after -- to more than one, each would act on the other's service
// (or overwrite the other's metrics).
var oneWatchdogs = []string{"service", "url", "restart-cmd", "pid-file", "textfile"}

// unitPaths are the flags of a watchdog's command line that name a file
// or directory: a unit runs from /, where a relative one would lead
// elsewhere than it does here.
var unitPaths = []string{"inbox", "pid-file", "log", "cgroup", "textfile", "admin-socket"}

// checkUnitArgs parses u.Args as each of u's watchdogs' own command
// parses them, after the flags its unit gives it, and runs its checks: a
// unit is written only for a command line that runs. plain says they
// watch a plain process (--restart-cmd), not an airlock pod.
func checkUnitArgs(u watchdogs.Units) (plain bool, err error) {
	names := u.Watchdogs
	if len(names) == 0 {
		names = watchdogs.Watched
	}
	for _, name := range names {
		fl := pflag.NewFlagSet("airlock watchdog "+name, pflag.ContinueOnError)
		fl.SetOutput(io.Discard)
		var r *runFlags
		var check func() error
		switch name {
		case "shim":
			f := new(shimFlags)
			f.add(fl)
			r, check = &f.runFlags, f.check
		case "gateway":
			f := new(gatewayFlags)
			f.add(fl)
			r, check = &f.runFlags, f.check
		default:
			return false, fmt.Errorf("no watchdog %q", name)
		}
		// Every command's own (the root's persistent flag).
		level := fl.String("log-level", "", "")
		if err := fl.Parse(u.Args); err != nil {
			return false, fmt.Errorf("the %s watchdog's arguments after --: %w", name, err)
		}
		if fl.Changed("log-level") {
			if err := new(slog.Level).UnmarshalText([]byte(*level)); err != nil {
				return false, fmt.Errorf("the %s watchdog's arguments after --: --log-level: %w", name, err)
			}
		}
		if fl.NArg() > 0 {
			return false, fmt.Errorf("the %s watchdog's arguments after --: %q is not a flag; it takes none other", name, fl.Arg(0))
		}
		for _, own := range unitOwn {
			if fl.Changed(own) {
				return false, fmt.Errorf("--%s after --: the unit runs the %s watchdog with --once --state %s itself", own, name, u.StatePath(name))
			}
		}
		if len(names) > 1 {
			for _, one := range oneWatchdogs {
				if fl.Changed(one) {
					return false, fmt.Errorf("--%s after -- would go to every watchdog installed (%s): install each with its own (--watchdog NAME -- ...)", one, strings.Join(names, " and "))
				}
			}
		}
		for _, p := range unitPaths {
			if f := fl.Lookup(p); f != nil && fl.Changed(p) && !filepath.IsAbs(f.Value.String()) {
				return false, fmt.Errorf("--%s %q after --: want an absolute path: the unit runs from /", p, f.Value.String())
			}
		}
		r.once, r.state = true, u.StatePath(name)
		if err := check(); err != nil {
			return false, fmt.Errorf("the %s watchdog's arguments after --: %w", name, err)
		}
		plain = r.restartCmd != ""
	}
	return plain, nil
}

// thisExecutable is the running binary's path with its symlinks resolved,
// so that the units name the file that runs now, not a link that may later
// lead to another build or nowhere.
func thisExecutable() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", errors.Join(errors.New("cannot find this executable's path; give --airlock"), err)
	}
	return exe, nil
}

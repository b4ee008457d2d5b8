package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/airlock-sandbox/airlock/watchdogs"
	"github.com/spf13/cobra"
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
			var files []watchdogs.File
			var err error
			if systemd {
				if dir == "" {
					dir = "/etc/systemd/system"
				}
				u.StateDir = "/var/lib/airlock"
				files, err = u.Systemd()
			} else {
				home, herr := os.UserHomeDir()
				if dir == "" || u.LogDir == "" {
					if herr != nil {
						return fmt.Errorf("launchd's default directories are under the home directory: %w", herr)
					}
				}
				if dir == "" {
					dir = filepath.Join(home, "Library", "LaunchAgents")
				}
				if u.LogDir == "" {
					u.LogDir = filepath.Join(home, "Library", "Logs", "airlock")
				}
				u.StateDir = filepath.Join(home, "Library", "Application Support", "airlock")
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
			timers := ""
			for _, f := range written {
				if strings.HasSuffix(f.Path, ".timer") {
					timers += " " + filepath.Base(f.Path)
				}
			}
			fmt.Fprintln(w, "load them with: systemctl daemon-reload && systemctl enable --now airlock-pod.service"+timers)
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

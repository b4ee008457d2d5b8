package watchdogs

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Units says what `airlock watchdog install` writes: the init system's
// units for the two watchdogs and, on systemd, for the pod itself. Each
// unit stands alone: a watchdog that dies is started again by its timer
// (systemd) or by launchd, whatever the pod's unit does.
type Units struct {
	// Airlock is the absolute path of the airlock binary the units run.
	Airlock string
	// Manifest is the pod's manifest, absolute; "" runs `airlock up`
	// without one (the demo pod).
	Manifest string
	// StopGrace is the pod's stop grace (the manifest's stop_grace, its
	// default when there is none): the pod's unit gives the pod that long
	// and a margin to stop its services itself.
	StopGrace time.Duration
	// PodWatchdog is the pod unit's WatchdogSec=; see podWatchdog.
	PodWatchdog time.Duration
	// LogDir is where launchd writes each watchdog's stdout and stderr.
	LogDir string
	// StateDir, absolute, holds each watchdog's state file
	// (watchdog-NAME.json, its --state): what one-shot runs carry over.
	StateDir string
	// Args are appended to each watchdog's command line (`airlock
	// watchdog NAME --once --state FILE ARGS...`): how it reaches the pod
	// and where its inbox is.
	Args []string
	// Watchdogs are those to write units for (nil: every one of
	// Watched): a plain process's watchdogs differ in their arguments,
	// and are installed one at a time.
	Watchdogs []string
	// NoPod leaves out the pod's unit (systemd): the watchdogs watch a
	// plain process (a restart command), not an airlock pod.
	NoPod bool
}

// File is one unit to write: its file name and content.
type File struct {
	Name string
	Data []byte
}

// Watched are the watchdogs a unit can be written for, as `airlock
// watchdog NAME` names them.
var Watched = []string{"gateway", "shim"}

// Cadence is how often a timer or launchd runs a one-shot watchdog.
const Cadence = 5 * time.Minute

// DefaultPodWatchdog is WatchdogSec= of the pod's unit. The pod pings at
// half of it, and only while every service is healthy, so it must outlast
// the longest recovery accepted without a restart of the whole pod: a stop
// grace (10s), a restart backoff (capped at 30s by default), a start and
// its health checks.
const DefaultPodWatchdog = 2 * time.Minute

// unitName names the units: airlock-watchdog-NAME.{service,timer} on systemd,
// the launchd job's Label on launchd.
func unitName(watchdog string) string { return "airlock-watchdog-" + watchdog }

// PodUnit is the file name of the pod's systemd unit.
const PodUnit = "airlock-pod.service"

// check refuses what would make a unit that does not run what was asked.
func (u Units) check() error {
	var errs []error
	abs := func(flag, p string) {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path: an init system runs units from /", flag, p))
		}
	}
	if u.Airlock == "" {
		errs = append(errs, errors.New("the airlock binary's path is empty"))
	}
	abs("the airlock binary", u.Airlock)
	abs("the manifest", u.Manifest)
	abs("the log directory", u.LogDir)
	abs("the state directory", u.StateDir)
	if u.StateDir == "" {
		errs = append(errs, errors.New("the state directory is empty: a one-shot watchdog needs its state file"))
	}
	for _, a := range append([]string{u.Airlock, u.Manifest, u.LogDir, u.StateDir}, u.Args...) {
		// Neither unit file writes these as given: systemd's lines end at
		// a line break, and XML (a plist) has no control characters but
		// tab and line breaks, nor invalid UTF-8, which its encoder
		// silently replaces: launchd would run another argument.
		if !utf8.ValidString(a) || strings.ContainsFunc(a, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			errs = append(errs, fmt.Errorf("%q: a unit's argument cannot hold a control character (a NUL, a line break) or bytes that are not UTF-8", a))
		}
	}
	for _, w := range u.Watchdogs {
		if !slices.Contains(Watched, w) {
			errs = append(errs, fmt.Errorf("no watchdog %q: there are %s", w, strings.Join(Watched, " and ")))
		}
	}
	if u.NoPod && u.Manifest != "" {
		errs = append(errs, errors.New("a manifest, but no pod's unit to run it"))
	}
	if u.PodWatchdog < 0 || u.StopGrace < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	return errors.Join(errs...)
}

func (u Units) watchdogs() []string {
	if len(u.Watchdogs) == 0 {
		return Watched
	}
	return u.Watchdogs
}

// StatePath is watchdog name's state file, its unit's --state.
func (u Units) StatePath(name string) string {
	return filepath.Join(u.StateDir, "watchdog-"+name+".json")
}

func (u Units) watchdogArgs(name string) []string {
	return append([]string{u.Airlock, "watchdog", name, "--once", "--state", u.StatePath(name)}, u.Args...)
}

// Systemd returns, for each watchdog, a oneshot service and the timer
// that runs it every Cadence, and the pod's own unit (unless NoPod).
func (u Units) Systemd() ([]File, error) {
	if err := u.check(); err != nil {
		return nil, err
	}
	var files []File
	for _, name := range u.watchdogs() {
		files = append(files,
			File{unitName(name) + ".service", []byte(fmt.Sprintf(watchdogService, name, execLine(u.watchdogArgs(name)), Cadence-time.Minute, ExitBusy))},
			File{unitName(name) + ".timer", []byte(fmt.Sprintf(watchdogTimer, name, Cadence))})
	}
	if u.NoPod {
		return files, nil
	}
	up := []string{u.Airlock, "up"}
	what := "the demo pod"
	if u.Manifest != "" {
		up = append(up, u.Manifest)
		what = u.Manifest
	}
	wd := u.PodWatchdog
	if wd == 0 {
		wd = DefaultPodWatchdog
	}
	pod := fmt.Sprintf(podService, escapeSpecifiers(what), execLine(up), seconds(wd), seconds(u.StopGrace+30*time.Second))
	return append(files, File{PodUnit, []byte(pod)}), nil
}

// seconds is a duration as systemd reads it, rounded up to a second.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int64((d+time.Second-1)/time.Second))
}

// execLine is an ExecStart= command line: each word quoted when it holds
// what systemd would split or unescape, and % and $ doubled, so that no
// word is read as a specifier or a variable.
func execLine(args []string) string {
	words := make([]string, len(args))
	for i, a := range args {
		a = escapeSpecifiers(strings.ReplaceAll(a, "$", "$$"))
		if a == "" || strings.ContainsAny(a, " \t\"'\\;") {
			a = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(a) + `"`
		}
		words[i] = a
	}
	return strings.Join(words, " ")
}

func escapeSpecifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// A watchdog's service runs it once; its timer is what repeats it.
// TimeoutStartSec ends a run that hangs before the next one is due.
const watchdogService = `# Written by airlock watchdog install. Run by %[1]s's timer, every 5 minutes.
[Unit]
Description=airlock %[1]s watchdog (one check; recovers what it finds)
Documentation=https://github.com/airlock-sandbox/airlock#host-watchdogs-installing-them
# Ordering only: the watchdog also serves a pod that is not airlock's.
After=airlock-pod.service

[Service]
Type=oneshot
ExecStart=%[2]s
TimeoutStartSec=%[3]v
# Another run on the same state was under way (one by hand): this one did
# nothing, and nothing failed.
SuccessExitStatus=%[4]d
`

// OnUnitActiveSec repeats the run every cadence after the last one;
// Persistent= applies only to OnCalendar=, so it is not set.
const watchdogTimer = `# Written by airlock watchdog install. Enable it: systemctl enable --now airlock-watchdog-%[1]s.timer
[Unit]
Description=airlock %[1]s watchdog, every %[2]v
Documentation=https://github.com/airlock-sandbox/airlock#host-watchdogs-installing-them

[Timer]
OnBootSec=%[2]v
OnUnitActiveSec=%[2]v
AccuracySec=10s

[Install]
WantedBy=timers.target
`

// The pod's unit. systemd was not PID 1 where this was written, so each
// hardening directive was chosen from what the launcher's code needs (the
// reason is beside it in the unit, for the operator who edits it), and the
// demo pod was booted, served and stopped under what could be reproduced
// without systemd: a slave mount namespace with /usr and /boot read-only
// and /dev/kmsg hidden, a UTS namespace, and no_new_privs. The seccomp-only
// directives deny calls airlock's code does not make.
const podService = `# Written by airlock watchdog install. Enable it: systemctl enable --now airlock-pod.service
[Unit]
Description=airlock pod (%[1]s)
Documentation=https://github.com/airlock-sandbox/airlock#the-pod-airlock-up
Wants=network-online.target
After=network-online.target

[Service]
# READY=1 once every service is healthy; WATCHDOG=1 at half WatchdogSec=,
# only while every service is healthy.
Type=notify
NotifyAccess=main
ExecStart=%[2]s
WatchdogSec=%[3]s
# The pod exits 1 when it fails while running (its proxy, or every service
# gone): a fresh pod is started, whose boot removes what the last one left.
Restart=on-failure
RestartSec=5s
# airlock makes the pod's cgroups and enables controllers below them
# (today at the hierarchy's root, airlock-pod-NAME, outside this unit's
# group: systemd neither tracks nor kills the services there; the pod does).
Delegate=yes
# SIGTERM to airlock only: it stops the services in dependency order within
# the manifest's stop_grace, then the network and cgroups. Whatever is left
# after TimeoutStopSec (stop_grace and a margin) is killed.
KillMode=mixed
TimeoutStopSec=%[4]s

# Hardening that leaves the launcher what it needs (root with every
# capability, new mount/PID/network namespaces, cgroup v2 writes, nftables
# over netlink, /run/airlock, bind mounts in its sandboxes' namespaces).
# The seccomp filters systemd installs here are inherited by every service.
#
# The launcher execs only itself, and sets no_new_privs on each sandbox anyway.
NoNewPrivileges=yes
# /usr and /boot read-only; not "full": /etc, /var and /run hold what a
# manifest names (policy, CA, state), which the pod may write.
ProtectSystem=yes
# airlock never sets a hostname and makes no UTS namespace.
ProtectHostname=yes
# Neither airlock nor an agent's service has use for realtime scheduling.
RestrictRealtime=yes
# No personality(2) call in airlock; services are native binaries.
LockPersonality=yes
# airlock makes no setuid/setgid file; its services run with no_new_privs.
RestrictSUIDSGID=yes
# OOM kills are read from the cgroups' memory.events, not the kernel log.
ProtectKernelLogs=yes
#
# Left out, each because it would break the launcher or a manifest:
#   ProtectHome, PrivateTmp: a manifest's paths (dir, landlock, secrets) may
#     be under /home, /root or /tmp, and must be the host's.
#   ProtectControlGroups, ProtectKernelTunables: read-only /sys/fs/cgroup
#     (ProtectKernelTunables makes /sys read-only) stops the pod's cgroups.
#   ProtectKernelModules: the redirect's nf_tables, conntrack and ifb may
#     be loaded on first use.
#   ProtectClock, PrivateDevices, DevicePolicy: each sets a device allow
#     list on this unit's cgroup, where the launcher's sandboxes start.
#   PrivateNetwork, RestrictNamespaces, RestrictAddressFamilies,
#     CapabilityBoundingSet: the launcher makes namespaces, nft rules over
#     netlink, and drops each service's capabilities itself.
#   MemoryDenyWriteExecute: inherited by the services, it breaks Node's JIT.

[Install]
WantedBy=multi-user.target
`

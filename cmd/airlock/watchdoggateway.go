package main

import (
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/nodeopts"
	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"github.com/airlock-sandbox/airlock/watchdogs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// gatewayFlags are `airlock watchdog gateway`'s flags.
type gatewayFlags struct {
	runFlags
	url, log, cgroup, maxMemory string
	heapMB, maxHeapMB           int
	maxMemoryBytes              int64
}

func (f *gatewayFlags) check() error {
	if err := f.runFlags.check(); err != nil {
		return err
	}
	switch {
	case f.url != "" && checkURL("--url", f.url) != nil:
		return fmt.Errorf("%w: want http://HOST:PORT/PATH, the gateway's health URL", checkURL("--url", f.url))
	case f.adminSocket != "" && (f.log != "" || f.cgroup != ""):
		return errors.New("--log and --cgroup go with --restart-cmd: an airlock pod's supervisor keeps its services' output and cgroups, and says what it saw")
	case f.restartCmd != "" && f.url == "" && f.pidFile == "":
		return errors.New("a plain gateway needs --url or --pid-file (or both): nothing would say whether it runs")
	case f.maxHeapMB > nodeopts.MaxHeapMB:
		return fmt.Errorf("--max-heap-mb %d: at most %d (64 GiB): a pod's supervisor refuses a larger heap, and a plain gateway would be given one no host has", f.maxHeapMB, nodeopts.MaxHeapMB)
	case f.heapMB < 0 || f.maxHeapMB < 1 || f.heapMB > f.maxHeapMB:
		return fmt.Errorf("--heap-mb %d and --max-heap-mb %d: want 0 ≤ --heap-mb ≤ --max-heap-mb, and a positive cap", f.heapMB, f.maxHeapMB)
	}
	v, ok := yamlobj.ParseSize(f.maxMemory)
	if !ok || v <= 0 {
		return fmt.Errorf("--max-memory %q: want a size, bytes or with K, M or G (\"8G\")", f.maxMemory)
	}
	f.maxMemoryBytes = v
	return nil
}

func newWatchdogGatewayCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Watch the Node gateway; restart it after an OOM with more memory, within a budget",
		Long: `Watches the Node gateway and tells apart, from evidence, why it went down:
  - V8 ran out of heap (its "FATAL ERROR: ... JavaScript heap out of memory"
    line in its output, and it ended: another pid, or none):
    restarted with a doubled --max-old-space-size in NODE_OPTIONS (from
    --heap-mb, up to --max-heap-mb);
  - the OOM killer killed it at its cgroup's memory limit (the group's
    oom_kill count grew): restarted with a doubled limit, up to --max-memory;
  - anything else: restarted as it was.
A gateway that runs but does not answer --url --hung-after times in a row is
hung, and replaced.

For an airlock pod (--admin-socket) the supervisor's status is the evidence
(its exits, last output, OOM kills, heap and limit) and the restart, with its
change, goes through the supervisor. For a plain process (--restart-cmd,
run by /bin/sh -c): --pid-file says whether it runs (and is SIGKILLed before
the next one starts), --log is the file its output goes to, --cgroup its
memory cgroup; the command gets NODE_OPTIONS and AIRLOCK_NODE_HEAP_MB with
the heap, and the limit is written to the cgroup before it runs.

Past --max-restarts in --window it gives up with a critical line. Every
finding and restart is one line in --inbox (source watchdog-gateway).

Exit status with --once: 0 when the gateway is healthy, suspect or recovered,
1 when it is not (a failed restart, given up, or blind: the watchdog could
not look), or when its state file cannot be read (a critical state_unreadable
line, once); 75 when another run on the same --state is under way (this one
does nothing), 1 when one has been for over 30 minutes (a critical
watchdog_stuck line).`,
		Example: `  airlock watchdog gateway --once --state /var/lib/airlock/watchdog-gateway.json \
    --admin-socket /run/airlock/pod/admin.sock --inbox /var/lib/airlock/pod/agent-inbox.jsonl
  airlock watchdog gateway --interval 10s --state /var/lib/airlock/gw.json --inbox inbox.jsonl \
    --url http://127.0.0.1:18789/healthz --pid-file /run/gw.pid --log /var/log/gw.log \
    --heap-mb 1024 --restart-cmd 'node /opt/gw/index.js >>/var/log/gw.log 2>&1 & echo $! >/run/gw.pid'`,
		Args:        cobra.NoArgs,
		Annotations: serviceLogs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return &exitError{ExitUsage, err}
			}
			return runGatewayWatchdog(cmd, &f)
		},
	}
	f.add(cmd.Flags())
	return cmd
}

func (f *gatewayFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.url, "url", "", "the gateway's health `URL` (through the pod's admin socket when the pod is airlock's)")
	fl.StringVar(&f.log, "log", "", "`PATH` of the file the gateway's output goes to (a plain process): V8's last words are read there")
	fl.StringVar(&f.cgroup, "cgroup", "", "`DIR` of the gateway's memory cgroup (a plain process): its OOM kills are counted, its limit raised")
	fl.IntVar(&f.heapMB, "heap-mb", 0, "the heap, `MB`, the gateway starts with; 0: not known (a heap OOM then goes to the cap at once)")
	fl.IntVar(&f.maxHeapMB, "max-heap-mb", 4096, "the heap, `MB`, a heap OOM's restarts grow to, and no further (at most 65536)")
	fl.StringVar(&f.maxMemory, "max-memory", "8G", "the memory limit, `SIZE` (bytes, or with K, M or G), an OOM kill's restarts grow to, and no further")
	f.runFlags.add(fl, "gateway")
}

func runGatewayWatchdog(cmd *cobra.Command, f *gatewayFlags) error {
	g := &watchdogs.Gateway{
		Heap:   watchdogs.Steps{Start: int64(f.heapMB), Max: int64(f.maxHeapMB)},
		Memory: watchdogs.Steps{Max: f.maxMemoryBytes},
	}
	var dial watchdogs.Dialer
	if f.adminSocket != "" {
		t := watchdogs.PodTarget{Socket: f.adminSocket, Service: f.service, Timeout: f.restartTimeout}
		g.Target, dial = t, t.Dial
	} else {
		g.Target = watchdogs.ProcessTarget{Log: f.log, Cgroup: f.cgroup,
			Command: watchdogs.CommandRestart{Command: f.restartCmd, PidFile: f.pidFile, Timeout: f.restartTimeout, Output: commandOutput(cmd)}}
	}
	if f.url != "" {
		g.Health = watchdogs.NewHTTPProbe(f.url, f.probeTimeout, watchdogs.KindGatewayCrash, watchdogs.KindGatewayHung, dial)
	}
	return runWatchdog(cmd, &watchdogs.Watchdog{Source: "watchdog-gateway", Probe: g, Recover: g}, &f.runFlags)
}

// Command bench compares airlock with no proxy ("direct"), squid,
// tinyproxy, a bare Go CONNECT relay and, where it inspects, mitmproxy,
// on loopback, in one run, and prints the figures, airlock's ratios and
// issue 16's targets met or not: plain-HTTP keep-alive, new CONNECT+TLS
// tunnels, HTTPS keep-alive inside a tunnel, a TLS download and raw bytes
// through a tunnel, inspected new connections and inspected keep-alive,
// each with p50/p99 latency and the proxy's and the ends' CPU per
// operation (table.go); then (scenario "transparent", as root) the same
// proxy's transparent path beside its explicit one, inside an `airlock
// launch` sandbox (transparent.go); (scenario "pod", as root) `airlock
// up`: the demo pod's boot to READY, a crashed service's return to
// healthy, and the supervisor's memory with 20 services (pod.go);
// (scenario "watchdog", as root) `airlock watchdog` daemons' fault to
// recovered time for each fault they recover from (watchdog.go);
// (scenario "spawn", as root) `airlock spawn`'s overhead on the local
// substrate beyond `airlock launch`'s own start (spawn.go); and (scenario
// "start", as root) a sandbox's start beside bubblewrap's (start.go).
// `make bench` runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

var (
	duration  = flag.Duration("d", 3*time.Second, "duration of each measurement")
	conc      = flag.Int("c", 32, "concurrent clients (issue 16's run: 32)")
	airlock   = flag.String("airlock", "bin/airlock", "airlock binary")
	only      = flag.String("proxies", "direct,airlock,squid,tinyproxy,go-relay,go-loop,mitmproxy", "which to measure")
	which     = flag.String("scenarios", "plain,tunnels,https,tlsbulk,bulk,mitm,transparent,pod,watchdog,spawn,start", "which scenarios to run (https: keep-alive inside an opaque tunnel; tlsbulk: a TLS download through a tunnel; bulk: raw bytes through one; mitm: inspected new connections and keep-alive; as root: transparent: airlock launch, pod: airlock up, watchdog: airlock watchdog daemons, spawn: airlock spawn beside airlock launch, start: sandbox start beside bwrap)")
	relayAddr = flag.String("relay", "", "run as the go-relay reference on this address (the bench starts it)")
	loopAddr  = flag.String("loop", "", "run as the go-loop reference on this address (the bench starts it)")
	smapAddr  = flag.String("sockmap", "", "run as the go-sockmap reference on this address (the bench starts it, as root)")
	rounds    = flag.Int("rounds", 3, "rounds, each measuring every proxy; the table shows medians")
)

func main() {
	flag.Parse()
	if *loopAddr != "" {
		goLoop(*loopAddr)
	}
	if *relayAddr != "" {
		goRelay(*relayAddr)
	}
	if *smapAddr != "" {
		goSockmap(*smapAddr)
	}
	if *serveDNSFloor {
		dnsFloor()
	}
	if *sandboxClient != "" {
		if err := runSandboxClient(*sandboxClient); err != nil {
			fmt.Fprintln(os.Stderr, "bench: sandbox client:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	for _, p := range paths {
		if wanted(p.scenario) {
			if err := runProxies(); err != nil {
				return err
			}
			break
		}
	}
	if wanted("transparent") {
		if err := runTransparent(); err != nil { // the pod is still measured
			fmt.Fprintln(os.Stderr, "transparent: not measured:", err)
		}
	}
	var err error
	if wanted("pod") {
		err = runPod()
	}
	if wanted("watchdog") { // measured even when the pod failed
		err = errors.Join(err, runWatchdogs())
	}
	if wanted("spawn") {
		err = errors.Join(err, runSpawn())
	}
	if wanted("start") {
		err = errors.Join(err, runStart())
	}
	return err
}

// runProxies measures the proxies, round after round, and prints their
// table.
func runProxies() error {
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer func() { leaveCgroup() }() // set once the bench has moved into its cgroup

	up, err := startUpstreams(dir)
	if err != nil {
		return err
	}
	var cols []string
	for _, p := range proxies {
		if listed(*only, p.name) && servesWanted(p) {
			cols = append(cols, p.name)
		}
	}
	t := newTable()
	// Rounds interleave the proxies, so that a drift in the machine's
	// speed lands on all of them.
	for round := 0; round < *rounds; round++ {
		for _, p := range proxies {
			if !listed(*only, p.name) || !servesWanted(p) {
				continue
			}
			r, err := p.start(dir, up)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: not measured in round %d: %v\n", p.name, round+1, err)
				continue
			}
			for _, pa := range paths {
				if wanted(pa.scenario) && listed(p.serves, pa.scenario) {
					measurePath(t, p.name, r, up, pa)
				}
			}
			r.stop()
		}
	}
	t.print(os.Stdout, cols)
	return nil
}

// measurePath runs pa's load through the running proxy and adds its
// figures to t; a failed measurement counts against each of its rows,
// named on stderr.
func measurePath(t *table, name string, r *running, up *upstreams, pa path) {
	win := &window{proxy: r.cmd}
	res := pa.load(r, up, win)
	if res.err == nil && res.ops == 0 {
		res.err = errors.New("no operation completed")
	}
	if res.err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", name, pa.rate, res.err)
		for _, row := range pa.rows() {
			t.fail(row, name)
		}
		return
	}
	rate, units := res.rate(), float64(res.ops)
	if pa.perMB {
		rate, units = res.mbps(), float64(res.bytes)/(1<<20)
	}
	t.add(pa.rate, name, rate)
	if pa.p50 != "" {
		t.add(pa.p50, name, float64(res.p50.Microseconds()))
		t.add(pa.p99, name, float64(res.p99.Microseconds()))
	}
	if pa.cpu != "" && r.cmd != nil {
		t.add(pa.cpu, name, float64(win.proxyCPU.Microseconds())/units)
	}
	if pa.ends != "" {
		t.add(pa.ends, name, float64(win.endsCPU.Microseconds())/units)
	}
}

// servesWanted says whether p takes part in any scenario asked for.
func servesWanted(p proxy) bool {
	for _, s := range strings.Split(p.serves, ",") {
		if wanted(s) {
			return true
		}
	}
	return false
}

func wanted(scenario string) bool { return listed(*which, scenario) }

func listed(list, name string) bool { return strings.Contains(","+list+",", ","+name+",") }

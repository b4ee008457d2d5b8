package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/watchdogs"
)

// The watchdog figures (scenario "watchdog", root only): `airlock watchdog
// shim|gateway` as daemons over plain processes (the watchdogs' own test
// servers, watchdogs/testdata), one fault each, the time from the fault to
// the inbox's recovered restart line. Like the pod's, every time past the
// fault is an inbox line's timestamp, written by the watchdog as it
// happens.

var wdRuns = flag.Int("watchdog-runs", 5, "samples of each watchdog fault, each on a fresh server and a fresh daemon")

// The daemons' settings, and the issue's target for each fault: "under 2 s
// plus the probe interval".
const (
	wdInterval     = time.Second
	wdProbeTimeout = 500 * time.Millisecond
	wdHungAfter    = 3 // the command's default
	wdTargetBase   = 2 * time.Second
)

// wdTarget is a fault's target, with the hung shim's its own: no fault can
// be found before hung-after probes in a row have timed out, each
// started an interval after the one before.
func wdTarget(hung bool) time.Duration {
	if hung {
		return wdHungAfter*(wdInterval+wdProbeTimeout) + wdTargetBase
	}
	return wdTargetBase + wdInterval
}

// wdFault is one fault the bench injects, and the finding it must cause.
type wdFault struct {
	name    string // the table's row
	service string // shim or gateway
	kind    string // the finding's kind the inbox must show
	hung    bool
	heapMB  int   // the gateway's V8 heap (NODE_OPTIONS and --heap-mb); 0: Node's own
	memory  int64 // the gateway's cgroup limit; 0: no cgroup
	inject  func(p *wdProc) error
}

var wdFaults = []wdFault{
	{name: "shim SIGKILLed", service: "shim", kind: watchdogs.KindShimDead, inject: wdSignal(syscall.SIGKILL)},
	{name: "shim SIGSTOPped (hung)", service: "shim", kind: watchdogs.KindShimHung, hung: true, inject: wdSignal(syscall.SIGSTOP)},
	{name: "gateway out of V8 heap (32 MB)", service: "gateway", kind: watchdogs.KindGatewayHeapOOM, heapMB: 32, inject: wdRequest("/leak")},
	{name: "gateway OOM-killed (96 MiB cgroup)", service: "gateway", kind: watchdogs.KindGatewayOOMKill, memory: 96 << 20, inject: wdRequest("/hog")},
	{name: "gateway SIGKILLed (crash)", service: "gateway", kind: watchdogs.KindGatewayCrash, inject: wdSignal(syscall.SIGKILL)},
}

func wdSignal(sig syscall.Signal) func(*wdProc) error {
	return func(p *wdProc) error {
		pid, err := p.pid()
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("kill(%d, %v): %w", pid, sig, err)
		}
		return nil
	}
}

// wdRequest sends a request the gateway dies of, and never answers.
func wdRequest(path string) func(*wdProc) error {
	return func(p *wdProc) error {
		c := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
		go func() {
			if resp, err := c.Get(p.base + path); err == nil {
				resp.Body.Close()
			}
		}()
		return nil
	}
}

// wdSample is one fault's way back, as the inbox shows it.
type wdSample struct {
	detect  time.Duration // fault → finding line: the rounds until a probe sees it
	recover time.Duration // finding → recovered restart line: the restart, and the settle until healthy
}

func (s wdSample) total() time.Duration { return s.detect + s.recover }

// wdSplit reads a sample from the inbox lines a watchdog wrote after the
// fault at fault: its finding, which must be of kind want, then the restart
// that recovered it. done is false while the restart line has not come.
// A failed restart or a give-up is an error naming the line.
func wdSplit(evs []events.Event, fault time.Time, want string) (s wdSample, done bool, err error) {
	var found time.Time
	for _, e := range evs {
		switch {
		case e.Kind == "give_up" || e.Kind == "restart" && !e.Recovered:
			return s, false, fmt.Errorf("%s %s (%s): %s", e.Source, e.Kind, e.Severity, e.Detail)
		case e.Kind == "restart" && found.IsZero():
			return s, false, fmt.Errorf("%s restart with no finding before it: %s", e.Source, e.Detail)
		case e.Kind == "restart":
			return wdSample{detect: found.Sub(fault), recover: e.TS.Sub(found)}, true, nil
		case !found.IsZero():
			return s, false, fmt.Errorf("%s %s after the finding, before its restart: %s", e.Source, e.Kind, e.Detail)
		case e.Kind != want:
			return s, false, fmt.Errorf("%s found %s, want %s: %s", e.Source, e.Kind, want, e.Detail)
		default:
			found = e.TS
		}
	}
	return s, false, nil
}

func runWatchdogs() error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "watchdog: not measured: the OOM kill needs a memory cgroup, and root")
		return nil
	}
	servers, err := wdServers()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "airlock-wdbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// An interrupted bench still cleans up: the servers, started in the
	// background by sh, ignore SIGINT and would outlive it.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	samples := make([][]wdSample, len(wdFaults))
	for i, f := range wdFaults {
		for n := 0; n < *wdRuns; n++ {
			s, err := wdRun(ctx, filepath.Join(dir, fmt.Sprintf("%d-%d", i, n)), f, servers[f.service])
			if ctx.Err() != nil {
				return fmt.Errorf("watchdog: interrupted: %w", err)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "watchdog: %s, sample %d: %v\n", f.name, n+1, err)
				continue
			}
			samples[i] = append(samples[i], s)
		}
	}
	printWatchdogs(samples)
	return nil
}

// wdServers are the watchdogs' test servers as argv before their port:
// the real python, not a version manager's shim script before it, whose
// own start would be counted in every shim restart.
func wdServers() (map[string][]string, error) {
	for _, s := range []string{"watchdogs/testdata/shim.py", "watchdogs/testdata/gateway.js"} {
		if _, err := os.Stat(s); err != nil {
			return nil, fmt.Errorf("the watchdogs' test servers: %w (run the bench from the repository's root)", err)
		}
	}
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return nil, fmt.Errorf("python3 for the shim: %w", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node for the gateway: %w", err)
	}
	shim, _ := filepath.Abs("watchdogs/testdata/shim.py")
	gateway, _ := filepath.Abs("watchdogs/testdata/gateway.js")
	return map[string][]string{
		"shim":    {strings.TrimSpace(string(out)), shim},
		"gateway": {node, gateway},
	}, nil
}

// wdRun starts a fresh server and a fresh watchdog daemon over it in dir,
// waits for the daemon's first round (healthy: no line), injects the fault
// and reads its way back from the inbox. Whatever it started is gone when
// it returns.
func wdRun(ctx context.Context, dir string, f wdFault, server []string) (s wdSample, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return s, err
	}
	p := &wdProc{ctx: ctx, dir: dir, fault: f}
	defer p.cleanup()
	if f.memory > 0 {
		if p.cgroup, err = cgroup2.NewMemoryGroup(fmt.Sprintf("airlock-wdbench-%d-%s", os.Getpid(), filepath.Base(dir)), f.memory); err != nil {
			return s, err
		}
	}
	if err := p.start(server); err != nil {
		return s, err
	}
	if err := p.startWatchdog(); err != nil {
		return s, err
	}
	// A round leaves the state file; with the server answering before the
	// daemon started, and no inbox line, it was a healthy one.
	if err := p.await("the watchdog's first round", func() (bool, error) {
		_, err := os.Stat(p.state)
		return err == nil, nil
	}); err != nil {
		return s, err
	}
	if evs, _ := events.Read(p.inbox, time.Time{}); len(evs) > 0 {
		return s, fmt.Errorf("the first round was not healthy: %s %s", evs[0].Kind, evs[0].Detail)
	}
	fault := time.Now()
	if err := f.inject(p); err != nil {
		return s, err
	}
	err = p.await("the recovered restart line", func() (bool, error) {
		evs, err := events.Read(p.inbox, time.Time{})
		if err != nil {
			return false, err
		}
		var done bool
		s, done, err = wdSplit(evs, fault, f.kind)
		return done, err
	})
	return s, err
}

// wdProc is one sample's server (a restart command's process, with its pid
// file and log) and its watchdog daemon.
type wdProc struct {
	ctx         context.Context // the bench's: ends on SIGINT or SIGTERM
	dir, cgroup string
	fault       wdFault
	base        string // http://127.0.0.1:PORT
	startCmd    string // starts a server in the background, writes its pid file
	pidFile     string
	log         string
	state       string
	inbox       string
	wdLog       string
	watchdog    *exec.Cmd
	exited      chan struct{}
	pids        []int // every server seen, killed at cleanup
}

func (p *wdProc) pid() (int, error) {
	raw, err := os.ReadFile(p.pidFile)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", p.pidFile, err)
	}
	p.pids = append(p.pids, pid)
	return pid, nil
}

// start starts the server with the command the watchdog restarts it with,
// and waits until it answers.
func (p *wdProc) start(server []string) error {
	p.pidFile, p.log = filepath.Join(p.dir, "server.pid"), filepath.Join(p.dir, "server.log")
	p.state, p.inbox, p.wdLog = filepath.Join(p.dir, "state.json"), filepath.Join(p.dir, events.DefaultFile), filepath.Join(p.dir, "watchdog.log")
	addr := freePort()
	p.base = "http://" + addr
	argv := fmt.Sprintf("%s %s %s", server[0], server[1], port(addr))
	if p.cgroup != "" {
		// The server's own pid joins the group, then becomes the server:
		// every byte it allocates is the group's.
		argv = fmt.Sprintf("sh -c 'echo $$ > %s/cgroup.procs && exec %s'", p.cgroup, argv)
	}
	p.startCmd = fmt.Sprintf("%s >> %s 2>&1 & echo $! > %s", argv, p.log, p.pidFile)
	cmd := exec.Command("/bin/sh", "-c", p.startCmd)
	cmd.Env = p.env()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("starting the %s: %w", p.fault.service, err)
	}
	if _, err := p.pid(); err != nil {
		return err
	}
	return p.await("the "+p.fault.service+" to answer", func() (bool, error) {
		c := http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: time.Second}
		resp, err := c.Get(p.url())
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (p *wdProc) url() string {
	if p.fault.service == "shim" {
		return p.base + "/v1/models"
	}
	return p.base + "/healthz"
}

// env is the environment of the first server and of the watchdog (whose
// restarts replace the heap in its NODE_OPTIONS).
func (p *wdProc) env() []string {
	env := os.Environ()
	if p.fault.heapMB > 0 {
		env = append(env, fmt.Sprintf("NODE_OPTIONS=--max-old-space-size=%d", p.fault.heapMB))
	}
	return env
}

func (p *wdProc) startWatchdog() error {
	args := []string{"watchdog", p.fault.service, "--interval", wdInterval.String(), "--probe-timeout", wdProbeTimeout.String(),
		"--hung-after", strconv.Itoa(wdHungAfter), "--state", p.state, "--inbox", p.inbox,
		"--url", p.url(), "--restart-cmd", p.startCmd, "--pid-file", p.pidFile}
	if p.fault.service == "gateway" {
		args = append(args, "--log", p.log)
	}
	if p.fault.heapMB > 0 {
		args = append(args, "--heap-mb", strconv.Itoa(p.fault.heapMB))
	}
	if p.cgroup != "" {
		args = append(args, "--cgroup", p.cgroup)
	}
	out, err := os.Create(p.wdLog)
	if err != nil {
		return err
	}
	defer out.Close()
	p.watchdog = exec.Command(*airlock, args...)
	// A file, not a pipe: the restart command's output goes there too,
	// and the server it leaves running would hold a pipe open.
	p.watchdog.Stdout, p.watchdog.Stderr, p.watchdog.Env = out, out, p.env()
	// A bench that dies takes its watchdog with it.
	p.watchdog.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.watchdog.Start(); err != nil {
		return err
	}
	p.exited = make(chan struct{})
	go func() { p.watchdog.Wait(); close(p.exited) }()
	return nil
}

// await polls cond until it holds, the watchdog exits, the bench is
// interrupted or 30 s pass.
func (p *wdProc) await(what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("the watchdog exited (%v) before %s:\n%s", p.watchdog.ProcessState, what, p.tail())
		case <-p.ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, p.ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come within 30s:\n%s", what, p.tail())
		}
	}
}

func (p *wdProc) tail() string {
	raw, _ := os.ReadFile(p.wdLog)
	return string(raw[max(0, len(raw)-2000):])
}

// cleanup stops the watchdog (SIGTERM, as its unit would), then kills
// every server seen and removes the cgroup.
func (p *wdProc) cleanup() {
	if p.exited != nil {
		p.watchdog.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.watchdog.Process.Kill()
			<-p.exited
		}
	}
	p.pid() // the last restart's server
	for _, pid := range p.pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if p.cgroup != "" {
		if err := sandbox.RemoveTree(p.cgroup); err != nil {
			fmt.Fprintln(os.Stderr, "watchdog:", err)
		}
	}
}

// --- the table ----------------------------------------------------------------

func printWatchdogs(samples [][]wdSample) {
	fmt.Printf("\n%-50s %10s %10s %10s %14s\n", fmt.Sprintf("watchdog daemons, %d samples per fault", *wdRuns), "median", "max", "target", "median/target")
	row := func(name string, ss []wdSample, part func(wdSample) time.Duration, target time.Duration) {
		if len(ss) == 0 {
			fmt.Printf("%-50s %10s\n", name, "-")
			return
		}
		var vals []float64
		for _, s := range ss {
			vals = append(vals, ms(part(s)))
		}
		hi := vals[0]
		for _, v := range vals {
			hi = max(hi, v)
		}
		med := median(vals)
		fmt.Printf("%-50s %7.0f ms %7.0f ms", name, med, hi)
		if target > 0 {
			fmt.Printf(" %7.0f ms %13.2fx", ms(target), med/ms(target))
		}
		fmt.Println()
	}
	for i, f := range wdFaults {
		row(f.name+" → recovered", samples[i], wdSample.total, wdTarget(f.hung))
		row("  fault → "+f.kind+" line (detection)", samples[i], func(s wdSample) time.Duration { return s.detect }, 0)
		row("  finding → recovered (restart, settle)", samples[i], func(s wdSample) time.Duration { return s.recover }, 0)
	}
	fmt.Printf("(--interval %v, --probe-timeout %v, --hung-after %d; each sample a fresh server and daemon, the fault injected just after the daemon's first, healthy round: detection is near its worst, a whole interval; target %v + the interval, and for the hung shim --hung-after × (interval + probe timeout) + %v)\n",
		wdInterval, wdProbeTimeout, wdHungAfter, wdTargetBase, wdTargetBase)
}

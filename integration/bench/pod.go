package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/demo"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// The pod figures (scenario "pod", root only): `airlock up` booting the
// demo pod, a crashed service coming back, and the supervisor's memory.
// Every time is read from the events file's timestamps, written by the
// supervisor as each step happens, so how often the bench looks at the file
// does not enter the figures.

var podRuns = flag.Int("pod-runs", 5, "demo pods booted: each gives one boot sample, then one crash of its shim")

// The targets for these figures.
const (
	bootTarget  = 300 * time.Millisecond // boot to READY, less the services' own start
	crashTarget = time.Second            // crash to a healthy replacement, at the first backoff step
	rssTarget   = 50 << 20               // the supervisor's RSS with 20 services
)

// shimBackoff is the demo shim's first backoff step, as its manifest
// (with the defaults) has it: "200ms ±20%".
func shimBackoff() string {
	m, err := manifest.Parse("pod.yaml", demo.Manifest, os.TempDir())
	if err != nil {
		return "?: " + err.Error()
	}
	for _, s := range m.Services {
		if s.Name == "shim" {
			return fmt.Sprintf("%v ±%.0f%%", s.Restart.Initial, 100*s.Restart.Jitter)
		}
	}
	return "?: no shim in the demo"
}

// bootSample splits one boot, first boot step to READY: what the services
// took to come up (from each one's started event to its first healthy
// health event; the demo's gateway starts after the shim is healthy, so
// the two add up) and the rest, the supervisor's: its boot steps before
// the services (policy, proxy, network, ...), then the services' sandbox
// launches and the events written meanwhile.
type bootSample struct{ total, services, steps time.Duration }

func (b bootSample) supervisor() time.Duration { return b.total - b.services }

// crashSample is a SIGKILL of a service's command to its replacement's
// first healthy check, in the steps the events show.
type crashSample struct {
	detect  time.Duration // kill → exit: the init sees its child die, the sandbox is torn down
	backoff time.Duration // exit → restart: the backoff delay
	launch  time.Duration // restart → started: the new sandbox, up to the command's exec
	start   time.Duration // started → healthy: the service's own start, as its probes see it
}

func (c crashSample) total() time.Duration { return c.detect + c.backoff + c.launch + c.start }

// memSample is the supervisor process's memory at READY.
type memSample struct {
	services                     int
	rss, rssAnon, rssFile, hwm   int64 // bytes, /proc/PID/status
	heapInuse, stackInuse, goSys int64 // bytes, /metrics go_memstats_*
	goroutines, threads          int64
}

func runPod() error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "pod: not measured: airlock up needs root")
		return nil
	}
	dir, err := os.MkdirTemp("", "airlock-podbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755) // the services' uids traverse it to their files

	var boots []bootSample
	var crashes []crashSample
	for i := 0; i < *podRuns; i++ {
		b, c, err := demoRun(filepath.Join(dir, fmt.Sprintf("demo-%d", i)))
		if err != nil {
			fmt.Fprintf(os.Stderr, "pod: demo run %d: %v\n", i+1, err)
			continue
		}
		boots, crashes = append(boots, b), append(crashes, c)
	}
	var mems []memSample
	for _, n := range []int{1, 20} {
		m, err := memRun(filepath.Join(dir, fmt.Sprintf("mem-%d", n)), n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pod: %d services: %v\n", n, err)
			continue
		}
		mems = append(mems, m)
	}
	printPod(boots, crashes, mems)
	return nil
}

// demoRun boots the demo pod in stateDir, reads its boot from the events,
// then SIGKILLs its shim's command and reads the way back to healthy. A
// fresh pod per sample: every crash is at the first backoff step, and
// never near the crash-loop limit.
func demoRun(stateDir string) (bootSample, crashSample, error) {
	var b bootSample
	var c crashSample
	if err := awaitPortsFree("127.0.0.1:18789", "127.0.0.1:18443"); err != nil {
		return b, c, err
	}
	p, err := startUp(stateDir, "up", "--state-dir", stateDir)
	if err != nil {
		return b, c, err
	}
	defer p.stop()
	evs, _, err := p.await(0, func(e events.Event) bool { return e.Kind == "ready" })
	if err != nil {
		return b, c, err
	}
	if b, err = bootTimes(evs); err != nil {
		return b, c, err
	}
	// The demo then drives itself through the ingress: let it finish,
	// so that the crash is measured on a quiet pod.
	if err := p.awaitOutput("Ctrl-C stops the pod."); err != nil {
		return b, c, err
	}
	c, err = crash(p, "shim")
	return b, c, err
}

// bootTimes reads a boot from its events. A boot_step event is written as
// its step ends, its detail "NAME done in D": the first step began D
// before its event.
func bootTimes(evs []events.Event) (bootSample, error) {
	var b bootSample
	var begin, ready time.Time
	started := map[string]time.Time{}
events:
	for _, e := range evs {
		switch {
		case e.Kind == "boot_step":
			f := strings.Fields(e.Detail)
			d, err := time.ParseDuration(f[len(f)-1])
			if err != nil {
				return b, fmt.Errorf("boot step %q: %w", e.Detail, err)
			}
			if begin.IsZero() {
				begin = e.TS.Add(-d)
			}
			if f[0] != "health" { // the wait for the services' health
				b.steps += d
			}
		case e.Kind == "started":
			started[e.Service] = e.TS
		case e.Kind == "health" && e.Detail == "healthy" && !started[e.Service].IsZero():
			// (A service's first healthy event is not "recovered": that
			// is a replacement's.)
			b.services += e.TS.Sub(started[e.Service])
			delete(started, e.Service)
		case e.Kind == "ready":
			ready = e.TS
			break events
		}
	}
	if begin.IsZero() || ready.IsZero() || len(started) > 0 {
		return b, fmt.Errorf("the events do not show a whole boot (first step %v, ready %v, never healthy %v)", begin, ready, started)
	}
	b.total = ready.Sub(begin)
	return b, nil
}

// crash SIGKILLs service's command (the child of its sandbox's init) and
// waits for its replacement's first healthy check.
func crash(p *upRun, service string) (crashSample, error) {
	var c crashSample
	st, err := p.status()
	if err != nil {
		return c, err
	}
	var init int
	for _, s := range st.Services {
		if s.Name == service && s.State == "healthy" {
			init = s.Pid
		}
	}
	if init == 0 {
		return c, fmt.Errorf("no healthy service %s in the status: %+v", service, st.Services)
	}
	pid, err := testutil.SandboxCommand(init)
	if err != nil {
		return c, err
	}
	n := len(p.read())
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return c, fmt.Errorf("kill %s's command %d: %w", service, pid, err)
	}
	evs, _, err := p.await(n, func(e events.Event) bool { return e.Kind == "health" && e.Service == service && e.Recovered })
	if err != nil {
		return c, err
	}
	at := map[string]time.Time{}
	for _, e := range evs[n:] {
		if e.Service == service && at[e.Kind].IsZero() {
			at[e.Kind] = e.TS
		}
	}
	for _, k := range []string{"exit", "restart", "started", "health"} {
		if at[k].IsZero() {
			return c, fmt.Errorf("after the kill of %s, no %s event", service, k)
		}
	}
	c = crashSample{
		detect: at["exit"].Sub(killed), backoff: at["restart"].Sub(at["exit"]),
		launch: at["started"].Sub(at["restart"]), start: at["health"].Sub(at["started"]),
	}
	return c, nil
}

// memRun boots a pod of n idle services (sleep, no health check: healthy
// once exec'd) with /metrics on loopback, and reads the supervisor's
// memory at READY.
func memRun(dir string, n int) (memSample, error) {
	m := memSample{services: n}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return m, err
	}
	metrics := freePort()
	var svc strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&svc, "  - {name: idle-%02d, command: [/usr/bin/sleep, infinity], preset: strict}\n", i)
	}
	manifest := filepath.Join(dir, "pod.yaml")
	spec := fmt.Sprintf("name: bench-mem-%d\nstate_dir: %s\nadmin: {http: %q}\nservices:\n%s", n, filepath.Join(dir, "state"), metrics, svc.String())
	if err := os.WriteFile(manifest, []byte(spec), 0o644); err != nil {
		return m, err
	}
	p, err := startUp(filepath.Join(dir, "state"), "up", manifest)
	if err != nil {
		return m, err
	}
	defer p.stop()
	if _, _, err := p.await(0, func(e events.Event) bool { return e.Kind == "ready" }); err != nil {
		return m, err
	}
	status, err := procStatus(p.cmd.Process.Pid)
	if err != nil {
		return m, err
	}
	m.rss, m.rssAnon, m.rssFile, m.hwm = status["VmRSS"], status["RssAnon"], status["RssFile"], status["VmHWM"]
	g, err := scrape("http://" + metrics + "/metrics")
	if err != nil {
		return m, err
	}
	m.heapInuse, m.stackInuse, m.goSys = int64(g["go_memstats_heap_inuse_bytes"]), int64(g["go_memstats_stack_inuse_bytes"]), int64(g["go_memstats_sys_bytes"])
	m.goroutines, m.threads = int64(g["go_goroutines"]), int64(g["go_threads"])
	return m, nil
}

// procStatus reads the kB fields of /proc/PID/status, in bytes.
func procStatus(pid int) (map[string]int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		out[k] = n << 10
	}
	return out, nil
}

// scrape reads the unlabelled samples of a Prometheus text page.
func scrape(url string) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// awaitPortsFree waits until the demo's fixed ports can be bound: another
// demo pod (a test's, an operator's) may hold them for a while.
func awaitPortsFree(addrs ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, a := range addrs {
		for {
			l, err := net.Listen("tcp", a)
			if err == nil {
				l.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the demo pod needs %s, still busy after 60s: %w", a, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return nil
}

// --- an airlock up process --------------------------------------------------

type upRun struct {
	cmd            *exec.Cmd
	out            *testutil.Buffer
	events, socket string
	exited         chan struct{}
}

// startUp runs `airlock <args>` for a pod whose state dir is stateDir.
func startUp(stateDir string, args ...string) (*upRun, error) {
	p := &upRun{out: &testutil.Buffer{}, exited: make(chan struct{}),
		events: filepath.Join(stateDir, events.DefaultFile), socket: filepath.Join(stateDir, "admin.sock")}
	p.cmd = exec.Command(*airlock, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Not under the bench's systemd unit, if any: the pod is no unit.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	// A bench that dies takes its pod with it (the pod then its services).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

func (p *upRun) read() []events.Event {
	evs, _ := events.Read(p.events, time.Time{})
	return evs
}

// await polls the events file until an event after the first n matches,
// and returns them all with its index.
func (p *upRun) await(n int, match func(events.Event) bool) ([]events.Event, int, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs := p.read()
		for i := n; i < len(evs); i++ {
			if evs[i].Kind == "boot_failed" || evs[i].Kind == "give_up" {
				return nil, 0, fmt.Errorf("%s: %s\n%s", evs[i].Kind, evs[i].Detail, p.tail())
			}
			if match(evs[i]) {
				return evs, i, nil
			}
		}
		select {
		case <-p.exited:
			return nil, 0, fmt.Errorf("airlock up exited (%v) before the event awaited:\n%s", p.cmd.ProcessState, p.tail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("the event awaited did not come within 60s:\n%s", p.tail())
		}
	}
}

func (p *upRun) awaitOutput(s string) error {
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(deadline) {
			return fmt.Errorf("airlock up did not print %q within 60s:\n%s", s, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func (p *upRun) tail() string {
	out := p.out.String()
	return out[max(0, len(out)-2000):]
}

func (p *upRun) status() (supervisor.Status, error) {
	var st supervisor.Status
	out, err := exec.Command(*airlock, "status", "--json", "--socket", p.socket).Output()
	if err != nil {
		return st, fmt.Errorf("airlock status: %w", err)
	}
	return st, json.Unmarshal(out, &st)
}

// stop ends the pod as its unit would (SIGTERM), SIGKILL after 30s.
func (p *upRun) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "pod: airlock up did not stop within 30s; killing it\n%s\n", p.tail())
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// --- the table ----------------------------------------------------------------

func printPod(boots []bootSample, crashes []crashSample, mems []memSample) {
	fmt.Printf("\n%-44s %10s %10s %10s %14s\n", fmt.Sprintf("airlock up, %d demo pods", len(boots)), "median", "max", "target", "median/target")
	row := func(name string, vals []float64, unit string, target float64) {
		if len(vals) == 0 {
			fmt.Printf("%-44s %10s\n", name, "-")
			return
		}
		hi := vals[0]
		for _, v := range vals {
			hi = max(hi, v)
		}
		med := median(vals)
		prec := 0
		if unit == "MiB" {
			prec = 1
		}
		fmt.Printf("%-44s %7.*f %s %7.*f %s", name, prec, med, unit, prec, hi, unit)
		if target > 0 {
			fmt.Printf(" %7.0f %s %13.2fx", target, unit, med/target)
		}
		fmt.Println()
	}
	each := func(f func(bootSample) time.Duration) (v []float64) {
		for _, b := range boots {
			v = append(v, ms(f(b)))
		}
		return v
	}
	row("boot to READY, total", each(func(b bootSample) time.Duration { return b.total }), "ms", 0)
	row("  services' own start (started→healthy)", each(func(b bootSample) time.Duration { return b.services }), "ms", 0)
	row("  supervisor (total − services)", each(bootSample.supervisor), "ms", ms(bootTarget))
	row("    its steps before the services", each(func(b bootSample) time.Duration { return b.steps }), "ms", 0)
	row("    sandbox launches, event writes", each(func(b bootSample) time.Duration { return b.supervisor() - b.steps }), "ms", 0)
	steps := func(f func(crashSample) time.Duration) (v []float64) {
		for _, c := range crashes {
			v = append(v, ms(f(c)))
		}
		return v
	}
	row("shim SIGKILLed → healthy again", steps(crashSample.total), "ms", ms(crashTarget))
	row("  kill → exit event (teardown)", steps(func(c crashSample) time.Duration { return c.detect }), "ms", 0)
	row("  exit → restart (backoff, "+shimBackoff()+")", steps(func(c crashSample) time.Duration { return c.backoff }), "ms", 0)
	row("  restart → started (sandbox launch)", steps(func(c crashSample) time.Duration { return c.launch }), "ms", 0)
	row("  started → healthy (service's own start)", steps(func(c crashSample) time.Duration { return c.start }), "ms", 0)
	mib := func(b int64) []float64 { return []float64{float64(b) / (1 << 20)} }
	for _, m := range mems {
		target := 0.0
		if m.services == 20 {
			target = float64(rssTarget) / (1 << 20)
		}
		row(fmt.Sprintf("supervisor RSS at READY, %d service(s)", m.services), mib(m.rss), "MiB", target)
		row("  peak so far (VmHWM)", mib(m.hwm), "MiB", 0)
		row("  anonymous (RssAnon)", mib(m.rssAnon), "MiB", 0)
		row("  file-backed: the binary's pages (RssFile)", mib(m.rssFile), "MiB", 0)
		row("  Go heap in use", mib(m.heapInuse), "MiB", 0)
		row("  Go stacks in use", mib(m.stackInuse), "MiB", 0)
		row("  Go runtime's total from the OS", mib(m.goSys), "MiB", 0)
		fmt.Printf("  %-42s %10d\n  %-42s %10d\n", "goroutines", m.goroutines, "threads", m.threads)
	}
	fmt.Println("(each row's median is its own, so parts need not add up; the times are the events file's timestamps; \"services' own start\" runs from a service's started event, written once its command is exec'd, to its first passing health check)")
}

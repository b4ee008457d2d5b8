// Command bench compares airlock with no proxy ("direct"), squid and
// tinyproxy on loopback, in one run, and prints the figures and ratios:
// plain-HTTP keep-alive requests/s with p50/p99 latency, new CONNECT+TLS
// tunnels/s, CONNECT bulk throughput, and (airlock only) MITM requests/s
// with a warm certificate cache; then (scenario "pod", as root) `airlock up`:
// the demo pod's boot to READY, a crashed service's return to healthy, and
// the supervisor's memory with 20 services (pod.go); and (scenario
// "transparent", as root) the same proxy's transparent path beside its
// explicit one, inside an `airlock launch` sandbox (transparent.go); and
// (scenario "watchdog", as root) `airlock watchdog` daemons' fault to
// recovered time for each fault they recover from (watchdog.go); and
// (scenario "spawn", as root) `airlock spawn`'s overhead on the local
// substrate beyond `airlock launch`'s own start (spawn.go). `make bench`
// runs it.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testca"
)

var (
	duration  = flag.Duration("d", 3*time.Second, "duration of each measurement")
	conc      = flag.Int("c", 8, "concurrent clients")
	airlock   = flag.String("airlock", "bin/airlock", "airlock binary")
	only      = flag.String("proxies", "direct,airlock,squid,tinyproxy,go-relay", "which to measure")
	which     = flag.String("scenarios", "plain,tunnels,bulk,mitm,transparent,pod,watchdog,spawn", "which scenarios to run (transparent: airlock launch, pod: airlock up, watchdog: airlock watchdog daemons, spawn: airlock spawn beside airlock launch, as root)")
	relayAddr = flag.String("relay", "", "run as the go-relay reference on this address (the bench starts it)")
	rounds    = flag.Int("rounds", 3, "rounds, each measuring every proxy; the table shows medians")
)

func main() {
	flag.Parse()
	if *relayAddr != "" {
		goRelay(*relayAddr)
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

// result is one measurement.
type result struct {
	ops      int
	bytes    int64
	elapsed  time.Duration
	p50, p99 time.Duration
	err      error
}

func (r result) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }
func (r result) mbps() float64 { return float64(r.bytes) / r.elapsed.Seconds() / (1 << 20) }

// rows of the table, in order. The CPU rows are the proxy process's own
// user+system time per operation, read from /proc: what it costs, apart
// from how the machine's two sides (load and upstream) share the CPUs.
var rows = []string{
	"plain keep-alive req/s", "plain p50 latency", "plain p99 latency",
	"new CONNECT+TLS tunnels/s", "CONNECT bulk MB/s", "MITM keep-alive req/s",
	"proxy CPU per plain req", "proxy CPU per new tunnel", "proxy CPU per MB bulk", "proxy CPU per MITM req",
	"ends' CPU per new tunnel", "ends' CPU per MB bulk",
}

// endsRow names, for a proxy CPU row, the row of what the clients and
// upstreams (the bench process itself) spent meanwhile: a relay in the path
// costs the two ends more too (each byte crosses loopback TCP twice), which
// bounds a relayed rate however cheap the relay is.
var endsRow = map[string]string{
	"proxy CPU per new tunnel": "ends' CPU per new tunnel",
	"proxy CPU per MB bulk":    "ends' CPU per MB bulk",
}

// inMicros marks the rows measured in µs, where lower is better.
func inMicros(row string) bool {
	return strings.Contains(row, "latency") || strings.Contains(row, "CPU per")
}

func run() error {
	for _, s := range []string{"plain", "tunnels", "bulk", "mitm"} {
		if wanted(s) {
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
	proxies := []struct {
		name  string
		start func(string, *upstreams) (string, *exec.Cmd, func(), error)
	}{
		{"direct", func(string, *upstreams) (string, *exec.Cmd, func(), error) { return "", nil, func() {}, nil }},
		{"airlock", startAirlock},
		{"squid", startSquid},
		{"tinyproxy", startTinyproxy},
		{"go-relay", startGoRelay},
	}
	// samples[row][proxy] holds one value per round; rounds interleave the
	// proxies so that a drift in the machine's speed lands on all of them.
	samples := map[string]map[string][]float64{}
	for _, r := range rows {
		samples[r] = map[string][]float64{}
	}
	failed := map[string]map[string]bool{}
	for round := 0; round < *rounds; round++ {
		for _, p := range proxies {
			if !listed(*only, p.name) {
				continue
			}
			addr, cmd, stop, err := p.start(dir, up)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: not measured: %v\n", p.name, err)
				continue
			}
			var airlockCA *x509.CertPool
			if p.name == "airlock" {
				if airlockCA, err = pool(filepath.Join(dir, "airlock-ca", "ca.pem")); err != nil {
					stop()
					return err
				}
			}
			add := func(row string, v float64, r result) {
				if r.err != nil {
					if failed[row] == nil {
						failed[row] = map[string]bool{}
					}
					failed[row][p.name] = true
					fmt.Fprintf(os.Stderr, "%s %s: %v\n", p.name, row, r.err)
					return
				}
				samples[row][p.name] = append(samples[row][p.name], v)
			}
			// cpu measures op and adds the proxy's CPU time per unit
			// (operations, or MB for bulk) to row, and the bench's own
			// (clients and upstreams) to its "ends" row, where there is one.
			cpu := func(row string, op func() result, units func(result) float64) result {
				before, ends := cpuTime(cmd), cpuTime(nil)
				r := op()
				spent, endsSpent := cpuTime(cmd)-before, cpuTime(nil)-ends
				if r.err == nil && units(r) > 0 {
					if cmd != nil {
						add(row, float64(spent.Microseconds())/units(r), r)
					}
					if er := endsRow[row]; er != "" {
						add(er, float64(endsSpent.Microseconds())/units(r), r)
					}
				}
				return r
			}
			ops := func(r result) float64 { return float64(r.ops) }
			if wanted("plain") && p.name != "go-relay" { // it relays CONNECT only
				r := cpu("proxy CPU per plain req", func() result { return plainKeepAlive(addr, up.plainURL) }, ops)
				add("plain keep-alive req/s", r.rate(), r)
				add("plain p50 latency", float64(r.p50.Microseconds()), r)
				add("plain p99 latency", float64(r.p99.Microseconds()), r)
			}
			if wanted("tunnels") {
				r := cpu("proxy CPU per new tunnel", func() result { return newTunnels(addr, up.tlsAddr, "127.0.0.2", up.roots) }, ops)
				add("new CONNECT+TLS tunnels/s", r.rate(), r)
			}
			if wanted("bulk") {
				r := cpu("proxy CPU per MB bulk", func() result { return bulk(addr, up.bulkAddr) }, func(r result) float64 { return float64(r.bytes) / (1 << 20) })
				add("CONNECT bulk MB/s", r.mbps(), r)
			}
			if wanted("mitm") {
				switch p.name {
				case "direct":
					r := tlsKeepAlive("", up.tlsAddr, "mitm.bench", up.roots)
					add("MITM keep-alive req/s", r.rate(), r)
				case "airlock":
					r := cpu("proxy CPU per MITM req", func() result {
						return tlsKeepAlive(addr, fmt.Sprintf("mitm.bench:%s", port(up.tlsAddr)), "mitm.bench", airlockCA)
					}, ops)
					add("MITM keep-alive req/s", r.rate(), r)
				}
			}
			stop()
		}
	}
	print(samples, failed)
	return nil
}

// cpuTime is the user+system time cmd's process has used so far; without
// a process (direct), the bench's own.
func cpuTime(cmd *exec.Cmd) time.Duration {
	pid := os.Getpid()
	if cmd != nil {
		pid = cmd.Process.Pid
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	var ticks int64
	for _, i := range []int{11, 12} { // utime, stime after the comm field
		var t int64
		fmt.Sscan(f[i], &t)
		ticks += t
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func wanted(scenario string) bool { return listed(*which, scenario) }

func listed(list, name string) bool { return strings.Contains(","+list+",", ","+name+",") }

func print(samples map[string]map[string][]float64, failed map[string]map[string]bool) {
	cols := []string{"direct", "airlock", "squid", "tinyproxy", "go-relay"}
	fmt.Printf("\n%-28s", fmt.Sprintf("median of %d rounds", *rounds))
	for _, c := range cols {
		fmt.Printf(" %12s", c)
	}
	fmt.Printf(" %14s %14s %14s %14s\n", "airlock/direct", "airlock/squid", "airlock/tiny", "airlock/go-relay")
	for _, row := range rows {
		unit := ""
		if inMicros(row) {
			unit = " µs"
		}
		fmt.Printf("%-28s", row)
		med := map[string]float64{}
		for _, c := range cols {
			cell := "-"
			switch {
			case failed[row][c]:
				cell = "error"
			case len(samples[row][c]) > 0:
				med[c] = median(samples[row][c])
				cell = fmt.Sprintf("%.0f%s", med[c], unit)
			}
			fmt.Printf(" %12s", cell)
		}
		for _, other := range []string{"direct", "squid", "tinyproxy", "go-relay"} {
			a, o := med["airlock"], med[other]
			if a == 0 || o == 0 {
				fmt.Printf(" %14s", "-")
				continue
			}
			fmt.Printf(" %13.2fx", a/o)
		}
		fmt.Println()
	}
	fmt.Printf("(loopback, %d clients, %s per measurement; latency and CPU rows: lower is better, so a ratio below 1 means airlock is cheaper)\n", *conc, *duration)
}

// --- upstreams -------------------------------------------------------------

type upstreams struct {
	plainURL string // http://127.0.0.2:P/
	tlsAddr  string // 127.0.0.2:P, certificate for 127.0.0.2, mitm.bench, bench.test, inspect.test
	bulkAddr string // 127.0.0.2:P, writes forever
	roots    *x509.CertPool
	caFile   string
}

func startUpstreams(dir string) (*upstreams, error) {
	u := &upstreams{}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	pl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	go http.Serve(pl, ok)
	u.plainURL = "http://" + pl.Addr().String() + "/"

	ca, err := testca.New(dir)
	if err != nil {
		return nil, err
	}
	u.roots, u.caFile = ca.Pool, ca.File
	tlsConfig, err := ca.ServerConfig("127.0.0.2", "mitm.bench", benchHost, inspectHost)
	if err != nil {
		return nil, err
	}
	tl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: ok, TLSConfig: tlsConfig}
	go srv.ServeTLS(tl, "", "")
	u.tlsAddr = tl.Addr().String()

	bl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 256<<10)
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	u.bulkAddr = bl.Addr().String()
	return u, nil
}

func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// --- load ------------------------------------------------------------------

// measure runs op from *conc workers for *duration.
func measure(op func(w int) (int64, error)) result {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lats []time.Duration
	var total atomic.Int64
	var errOnce sync.Once
	var firstErr error
	start := time.Now()
	deadline := start.Add(*duration)
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				t := time.Now()
				n, err := op(w)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				mine = append(mine, time.Since(t))
				total.Add(n)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	r := result{ops: len(lats), bytes: total.Load(), elapsed: time.Since(start), err: firstErr}
	if len(lats) > 0 {
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		r.p50, r.p99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	return r
}

func plainKeepAlive(proxyAddr, target string) result {
	tr := &http.Transport{MaxIdleConnsPerHost: *conc, DisableCompression: true}
	if proxyAddr != "" {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr})
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return measure(func(int) (int64, error) {
		resp, err := c.Get(target)
		if err != nil {
			return 0, err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return n, nil
	})
}

// dialThrough opens a connection to target, through a CONNECT when
// proxyAddr is set.
func dialThrough(proxyAddr, target string) (net.Conn, error) {
	if proxyAddr == "" {
		return net.Dial("tcp", target)
	}
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("CONNECT %s: %s (%s) %s", target, resp.Status, resp.Header.Get("X-Airlock-Reason"), body)
	}
	if br.Buffered() > 0 { // the upstream spoke first (bulk): keep its bytes
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func newTunnels(proxyAddr, target, serverName string, roots *x509.CertPool) result {
	return measure(func(int) (int64, error) {
		c, err := dialThrough(proxyAddr, target)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"http/1.1"}, ClientSessionCache: nil})
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+serverName+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return 0, err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 { // a transparent connection's denial is an answer too
			return 0, fmt.Errorf("status %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
		}
		return n, nil
	})
}

func bulk(proxyAddr, target string) result {
	c, err := dialThrough(proxyAddr, target)
	if err != nil {
		return result{err: err}
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	var n int64
	start := time.Now()
	for time.Since(start) < *duration {
		m, err := c.Read(buf)
		n += int64(m)
		if err != nil {
			return result{err: err}
		}
	}
	return result{ops: 1, bytes: n, elapsed: time.Since(start)}
}

// tlsKeepAlive issues keep-alive HTTPS requests, each worker on its own
// connection (through a CONNECT to an inspected host when proxyAddr is set).
func tlsKeepAlive(proxyAddr, target, serverName string, roots *x509.CertPool) result {
	conns := make([]*tls.Conn, *conc)
	readers := make([]*bufio.Reader, *conc)
	for i := range conns {
		c, err := dialThrough(proxyAddr, target)
		if err != nil {
			return result{err: err}
		}
		conns[i] = tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"http/1.1"}})
		readers[i] = bufio.NewReader(conns[i])
		defer conns[i].Close()
	}
	return measure(func(w int) (int64, error) {
		if _, err := io.WriteString(conns[w], "GET / HTTP/1.1\r\nHost: "+serverName+"\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(readers[w], nil)
		if err != nil {
			return 0, err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
		}
		return n, nil
	})
}

// --- proxies ---------------------------------------------------------------

func freePort() string {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

// waitListening polls until addr accepts connections.
func waitListening(addr string, cmd *exec.Cmd) error {
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		if cmd.ProcessState != nil {
			return errors.New("exited")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening after 5s", addr)
}

func startCmd(addr string, name string, args ...string) (*exec.Cmd, func(), error) {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	// A bench that dies (or is interrupted) takes its proxies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	go cmd.Wait()
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		time.Sleep(200 * time.Millisecond)
		cmd.Process.Kill()
	}
	if err := waitListening(addr, cmd); err != nil {
		stop()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return cmd, stop, nil
}

func startAirlock(dir string, up *upstreams) (string, *exec.Cmd, func(), error) {
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	preset := fmt.Sprintf(`package airlock.presets.bench

import data.airlock.lib

rules := [
	{"name": "bench", "binaries": [{"path": %q}], "hosts": ["127.0.0.2"], "ports": [%s, %s, %s]},
	{"name": "bench-mitm", "binaries": [{"path": %q}], "hosts": ["mitm.bench"], "ports": [%s], "inspect": true},
]

denies := []

decision := lib.decide(rules, denies)
`, self, port(up.plainURL[len("http://"):len(up.plainURL)-1]), port(up.tlsAddr), port(up.bulkAddr), self, port(up.tlsAddr))
	if err := os.WriteFile(filepath.Join(bundle, "bench.rego"), []byte(preset), 0o644); err != nil {
		return "", nil, nil, err
	}
	// The load generator is the sandbox: in its own cgroup when it can make
	// one (root, cgroup v2), which gives airlock the O(1) connect hook;
	// otherwise as a process tree.
	who := []string{"--pid", fmt.Sprint(os.Getpid())}
	if cg, err := benchCgroup(); err == nil {
		who = []string{"--cgroup", cg}
	} else {
		fmt.Fprintln(os.Stderr, "airlock: identity by process-tree scan:", err)
	}
	addr := freePort()
	cmd, stop, err := startCmd(addr, *airlock, append(append([]string{"proxy", "--listen", addr, "--policy", bundle, "--preset", "bench"}, who...), "--allow-range", "127.0.0.2/32", "--resolve", "mitm.bench:"+port(up.tlsAddr)+":127.0.0.2",
		"--upstream-ca", up.caFile, "--ca-dir", filepath.Join(dir, "airlock-ca"), "--audit-log", filepath.Join(dir, "audit.log"), "--log-level", "error")...)
	return addr, cmd, stop, err
}

// benchCgroup moves the bench into a fresh cgroup v2 leaf, once for all
// rounds; leaveCgroup moves it back out and removes the leaf.
var benchCgroup = sync.OnceValues(func() (string, error) {
	cg, leave, err := cgroup2.Enter(fmt.Sprintf("airlock-bench-%d", os.Getpid()))
	if err == nil {
		leaveCgroup = leave
	}
	return cg, err
})

var leaveCgroup = func() {}

func startSquid(dir string, _ *upstreams) (string, *exec.Cmd, func(), error) {
	if _, err := exec.LookPath("squid"); err != nil {
		return "", nil, nil, errors.New("squid not installed (apt-get install squid)")
	}
	addr := freePort()
	sd, err := os.MkdirTemp(dir, "squid-") // squid drops to its own user: one fresh directory per start
	if err != nil {
		return "", nil, nil, err
	}
	os.Chmod(sd, 0o777)
	conf := fmt.Sprintf(`http_port %s
http_access allow all
cache deny all
cache_mem 8 MB
access_log none
cache_store_log none
cache_log %s/cache.log
pid_filename %s/squid.pid
coredump_dir %s
workers 1
shutdown_lifetime 1 second
forwarded_for delete
via off
`, addr, sd, sd, sd)
	f := filepath.Join(sd, "squid.conf")
	os.WriteFile(f, []byte(conf), 0o644)
	return startWith(addr, "squid", "-N", "-f", f)
}

func startTinyproxy(dir string, _ *upstreams) (string, *exec.Cmd, func(), error) {
	if _, err := exec.LookPath("tinyproxy"); err != nil {
		return "", nil, nil, errors.New("tinyproxy not installed (apt-get install tinyproxy)")
	}
	addr := freePort()
	host, p, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf("Port %s\nListen %s\nTimeout 600\nMaxClients 512\nAllow 127.0.0.1\nLogLevel Critical\nDisableViaHeader Yes\n", p, host)
	if os.Geteuid() == 0 {
		conf += "User nobody\nGroup nogroup\n"
	}
	f := filepath.Join(dir, "tinyproxy.conf")
	os.WriteFile(f, []byte(conf), 0o644)
	return startWith(addr, "tinyproxy", "-d", "-c", f)
}

func startWith(addr, name string, args ...string) (string, *exec.Cmd, func(), error) {
	cmd, stop, err := startCmd(addr, name, args...)
	return addr, cmd, stop, err
}

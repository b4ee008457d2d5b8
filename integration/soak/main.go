// Command soak holds many idle keep-alive connections open through the real
// proxy (`airlock proxy`) while it pushes a million requests through it on
// loopback, and reads the proxy's resident memory (/proc/PID/status), open
// descriptors (/proc/PID/fd) and goroutines (its /metrics) before, with the
// idle connections open, at the peak of the load, and after everything has
// closed. It fails if the proxy does not come back to its baseline, or if
// an idle connection costs more than -max-idle-rss. `make soak` runs it; it
// is not part of `make test`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"golang.org/x/sys/unix"
)

var (
	airlock    = flag.String("airlock", "bin/airlock", "airlock binary")
	conns      = flag.Int("conns", 10000, "idle keep-alive connections held open")
	requests   = flag.Int("requests", 1000000, "requests pushed while they are open")
	workers    = flag.Int("workers", 64, "connections the requests are spread over")
	timeout    = flag.Duration("timeout", 20*time.Minute, "the whole run")
	settle     = flag.Duration("settle", 6*time.Minute, "longest wait for the proxy to come back to its baseline (pooled buffers go at the second of the runtime's 2-minute forced GCs, then pages are returned gradually)")
	maxIdleRSS = flag.Int("max-idle-rss", 64, "KiB of resident memory an idle connection may cost")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// sample is what the proxy holds at one moment. heapKiB (the runtime's
// live and not yet collected heap objects) and stackKiB (its goroutine
// stacks) say where resident memory goes.
type sample struct {
	rssKiB, fds, goroutines int
	heapKiB, stackKiB       int
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// This process holds the client end of every connection and the
	// upstream's; the proxy, which inherits the limit, the other ends.
	// Raising the hard limit needs CAP_SYS_RESOURCE, so the soft limit is
	// raised to the hard one, which must be enough.
	need := uint64(*conns+*workers) + 2048
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Max < need {
		lim.Max = need
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to %d for %d connections: %w", lim.Max, *conns, err)
	}
	// The soak is the sandbox: in its own cgroup, the proxy attributes
	// each connection with the connect hook. A process-tree scan would
	// read this process's 10,000 descriptors for each of them.
	cg, leave, err := cgroup2.Enter(fmt.Sprintf("airlock-soak-%d", os.Getpid()))
	if err != nil {
		return fmt.Errorf("cgroup for the connect hook (run as root on cgroup v2): %w", err)
	}
	defer leave()

	dir, err := os.MkdirTemp("", "airlock-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	px, err := startProxy(dir, cg, up.Addr)
	if err != nil {
		return err
	}
	defer px.stop()

	// Warm up (policy cache, leaf-free transport, first upstream dial),
	// then let it settle: the baseline is the proxy at rest.
	if err := openIdle(ctx, px.addr, up.Addr, 16, nil); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	base, err := px.settled(ctx, up, nil, sample{})
	if err != nil {
		return err
	}
	fmt.Printf("proxy pid %d, %d idle connections, %d requests over %d connections\n", px.cmd.Process.Pid, *conns, *requests, *workers)

	var idleConns []net.Conn
	defer func() {
		for _, c := range idleConns {
			c.Close()
		}
	}()
	start := time.Now()
	if err := openIdle(ctx, px.addr, up.Addr, *conns, &idleConns); err != nil {
		return fmt.Errorf("idle connections: %w", err)
	}
	idle, err := px.sample()
	if err != nil {
		return err
	}
	fmt.Printf("%d idle connections open in %s\n", len(idleConns), time.Since(start).Round(time.Millisecond))

	peak := idle
	stopPeak := px.watchPeak(&peak)
	start = time.Now()
	errs, err := load(ctx, px.addr, up.Addr)
	stopPeak()
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	elapsed := time.Since(start)
	fmt.Printf("%d requests in %s (%.0f/s), %d failed\n", *requests, elapsed.Round(time.Millisecond), float64(*requests)/elapsed.Seconds(), errs)

	for _, c := range idleConns {
		c.Close()
	}
	idleConns = nil
	start = time.Now()
	after, err := px.settled(ctx, up, &base, peak)
	if err != nil {
		return err
	}
	fmt.Printf("settled in %s\n\n", time.Since(start).Round(time.Second))

	fmt.Printf("%-24s %10s %8s %11s %11s %12s\n", "", "RSS (KiB)", "fds", "goroutines", "heap (KiB)", "stacks (KiB)")
	for _, row := range []struct {
		name string
		s    sample
	}{{"baseline", base}, {fmt.Sprintf("%d idle conns", *conns), idle}, {"peak under load", peak}, {"after", after}} {
		fmt.Printf("%-24s %10d %8d %11d %11d %12d\n", row.name, row.s.rssKiB, row.s.fds, row.s.goroutines, row.s.heapKiB, row.s.stackKiB)
	}
	perConn := float64(idle.rssKiB-base.rssKiB) / float64(*conns)
	fmt.Printf("\nper idle connection: %.1f KiB RSS, %.2f fds, %.2f goroutines\n", perConn,
		float64(idle.fds-base.fds)/float64(*conns), float64(idle.goroutines-base.goroutines)/float64(*conns))

	var failed []string
	if errs > 0 {
		failed = append(failed, fmt.Sprintf("%d requests failed", errs))
	}
	if perConn > float64(*maxIdleRSS) {
		failed = append(failed, fmt.Sprintf("an idle connection costs %.1f KiB, over %d KiB", perConn, *maxIdleRSS))
	}
	if !back(base, peak, after) {
		failed = append(failed, fmt.Sprintf("not back to the baseline after %s: %+v, baseline %+v", *settle, after, base))
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	fmt.Println("ok: back to the baseline, no leak")
	return nil
}

// back reports whether s is the baseline again: the same descriptors and
// goroutines (a couple of the runtime's own may come and go), and the heap
// and resident memory back within a tenth of what the peak added (at least
// 8 MiB): the runtime keeps its bookkeeping sized for the peak and returns
// freed pages gradually, but anything kept per connection or per request
// would be many times that.
func back(base, peak, s sample) bool {
	near := func(now, was, top int) bool { return now-was <= max(8<<10, (top-was)/10) }
	return s.fds <= base.fds+2 && s.goroutines <= base.goroutines+2 &&
		near(s.heapKiB, base.heapKiB, peak.heapKiB) && near(s.rssKiB, base.rssKiB, peak.rssKiB)
}

// --- the proxy ---------------------------------------------------------------

type proxy struct {
	cmd     *exec.Cmd
	addr    string
	metrics string
	exited  chan struct{}
}

func startProxy(dir, cg, upstream string) (*proxy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(upstream)
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		return nil, err
	}
	preset := fmt.Sprintf(`package airlock.presets.soak

import data.airlock.lib

rules := [{"name": "soak", "binaries": [{"path": %q}], "hosts": [%q], "ports": [%s], "methods": "read-only"}]

denies := []

decision := lib.decide(rules, denies)
`, self, host, port)
	if err := os.WriteFile(filepath.Join(bundle, "soak.rego"), []byte(preset), 0o644); err != nil {
		return nil, err
	}
	p := &proxy{addr: freePort(), metrics: freePort(), exited: make(chan struct{})}
	p.cmd = exec.Command(*airlock, "proxy", "--listen", p.addr, "--metrics", p.metrics,
		"--policy", bundle, "--preset", "soak", "--cgroup", cg,
		"--allow-range", host+"/32", "--max-conns", strconv.Itoa(*conns+*workers+64),
		"--audit-log", os.DevNull, "--log-level", "error")
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", p.addr); err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited: %v", *airlock, p.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if i == 200 {
			p.stop()
			return nil, fmt.Errorf("%s not listening on %s after 10s", *airlock, p.addr)
		}
	}
}

func (p *proxy) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *proxy) sample() (sample, error) {
	var s sample
	select {
	case <-p.exited:
		return s, fmt.Errorf("the proxy exited: %v", p.cmd.ProcessState)
	default:
	}
	pid := p.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			s.rssKiB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	// A new connection each time: a kept one would be a descriptor and a
	// goroutine of the proxy's own.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	// The scrape's own connection is counted in each sample alike.
	s.goroutines = -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "go_goroutines":
			s.goroutines = int(f)
		case "go_memstats_heap_alloc_bytes":
			s.heapKiB = int(f) >> 10
		case "go_memstats_stack_inuse_bytes":
			s.stackKiB = int(f) >> 10
		}
	}
	if s.goroutines < 0 {
		return s, errors.New("/metrics has no go_goroutines")
	}
	return s, sc.Err()
}

// watchPeak keeps the largest of each figure in *peak until stopped.
func (p *proxy) watchPeak(peak *sample) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if s, err := p.sample(); err == nil {
				peak.rssKiB = max(peak.rssKiB, s.rssKiB)
				peak.fds = max(peak.fds, s.fds)
				peak.goroutines = max(peak.goroutines, s.goroutines)
				peak.heapKiB = max(peak.heapKiB, s.heapKiB)
				peak.stackKiB = max(peak.stackKiB, s.stackKiB)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// settled waits until the proxy's figures stop moving (or, given a
// baseline, are back at it) and returns them. The upstream keeps dropping
// its idle connections, so that the proxy's pool of them empties too
// (net/http spares a connection that has not carried a request for 5 s:
// the proxy's transport dials spares under load).
func (p *proxy) settled(ctx context.Context, up *upstream, base *sample, peak sample) (sample, error) {
	deadline := time.Now().Add(*settle)
	var last sample
	steady := 0
	for {
		up.dropIdle()
		s, err := p.sample()
		if err != nil {
			return s, err
		}
		if base != nil && back(*base, peak, s) {
			return s, nil
		}
		if s.fds == last.fds && s.goroutines == last.goroutines {
			steady++
		} else {
			steady = 0
		}
		if base == nil && steady == 5 {
			return s, nil
		}
		last = s
		if time.Now().After(deadline) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// --- the clients ---------------------------------------------------------------

func request(upstream string) []byte {
	return []byte("GET http://" + upstream + "/ HTTP/1.1\r\nHost: " + upstream + "\r\nUser-Agent: airlock-soak\r\n\r\n")
}

// roundTrip sends one request on c and reads the whole answer.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return err
}

// openIdle opens n connections to the proxy, each carrying one request so
// that it is attributed, decided and left idle in keep-alive, as a client's
// pool leaves it. They are kept in *keep, or closed when keep is nil.
func openIdle(ctx context.Context, proxyAddr, upstream string, n int, keep *[]net.Conn) error {
	req := request(upstream)
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", proxyAddr, 10*time.Second)
			if err == nil {
				c.SetDeadline(time.Now().Add(30 * time.Second))
				// A small reader: the answer is a few hundred bytes.
				err = roundTrip(c, bufio.NewReaderSize(c, 512), req)
				c.SetDeadline(time.Time{})
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
				if c != nil {
					c.Close()
				}
			case keep != nil:
				*keep = append(*keep, c)
			default:
				c.Close()
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// load pushes -requests requests over -workers keep-alive connections and
// returns how many failed. A failed connection is replaced.
func load(ctx context.Context, proxyAddr, upstream string) (failed int64, err error) {
	req := request(upstream)
	var left atomic.Int64
	left.Store(int64(*requests))
	var errs atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var br *bufio.Reader
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				if c == nil {
					var err error
					if c, err = net.DialTimeout("tcp", proxyAddr, 10*time.Second); err != nil {
						errs.Add(1)
						c = nil
						continue
					}
					br = bufio.NewReader(c)
				}
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if err := roundTrip(c, br, req); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "first failed request:", err)
					}
					c.Close()
					c = nil
				}
			}
		}()
	}
	wg.Wait()
	return errs.Load(), ctx.Err()
}

// --- the upstream ---------------------------------------------------------------

type upstream struct {
	*http.Server
	Addr string
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	body := bytes.Repeat([]byte("x"), 64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })}
	go srv.Serve(ln)
	return &upstream{Server: srv, Addr: ln.Addr().String()}, nil
}

// dropIdle closes the upstream's idle keep-alive connections.
func (u *upstream) dropIdle() {
	u.SetKeepAlivesEnabled(false)
	u.SetKeepAlivesEnabled(true)
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

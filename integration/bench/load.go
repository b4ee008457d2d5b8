package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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

// window reads the CPU time a proxy (none: direct) and the ends (this
// process: the clients and the origins) spend over a measurement's timed
// part only, so that its setup (the keep-alive connections' dials and
// handshakes, a bulk download's request) is not counted per operation. A
// nil window reads nothing (the transparent scenario's client, whose CPU
// the bench outside reads).
type window struct {
	proxy             *exec.Cmd
	proxyCPU, endsCPU time.Duration
}

func (w *window) open() {
	if w == nil {
		return
	}
	w.endsCPU = -cpuTime(nil)
	if w.proxy != nil {
		w.proxyCPU = -cpuTime(w.proxy)
	}
}

func (w *window) close() {
	if w == nil {
		return
	}
	w.endsCPU += cpuTime(nil)
	if w.proxy != nil {
		w.proxyCPU += cpuTime(w.proxy)
	}
}

// cpuTime is the user+system time cmd's process has used so far; without
// a process (direct), the bench's own.
func cpuTime(cmd *exec.Cmd) time.Duration {
	pid := os.Getpid()
	if cmd != nil {
		pid = cmd.Process.Pid
	}
	return procCPU(pid, 11, 12) // utime, stime
}

// procCPU sums the given clock-tick fields of /proc/PID/stat, counted
// after the comm field (which may hold spaces); 0 once pid is gone.
func procCPU(pid int, fields ...int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	var ticks int64
	for _, i := range fields {
		var t int64
		fmt.Sscan(f[i], &t)
		ticks += t
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// measure runs op from *conc workers for *duration, inside win.
func measure(win *window, op func(w int) (int64, error)) result {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lats []time.Duration
	var total atomic.Int64
	var errOnce sync.Once
	var firstErr error
	win.open()
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
	win.close()
	r := result{ops: len(lats), bytes: total.Load(), elapsed: time.Since(start), err: firstErr}
	if len(lats) > 0 {
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		r.p50, r.p99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	return r
}

func plainKeepAlive(win *window, proxyAddr, target string) result {
	tr := &http.Transport{MaxIdleConnsPerHost: *conc, DisableCompression: true}
	if proxyAddr != "" {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr})
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return measure(win, func(int) (int64, error) {
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
		return nil, fmt.Errorf("CONNECT %s: %w", target, err)
	}
	if resp.StatusCode != 200 {
		c.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("CONNECT %s: %s (%s) %s", target, resp.Status, resp.Header.Get("X-Airlock-Reason"), body)
	}
	if br.Buffered() > 0 { // the upstream spoke first (raw bulk): keep its bytes
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// dialTLS opens a TLS connection to target (through a CONNECT when
// proxyAddr is set) and completes its handshake, trusting roots for
// serverName; HTTP/1.1 only, no session resumption: every handshake is whole.
func dialTLS(proxyAddr, target, serverName string, roots *x509.CertPool) (*tls.Conn, error) {
	c, err := dialThrough(proxyAddr, target)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS to %s through %q: %w", serverName, proxyAddr, err)
	}
	return tc, nil
}

// get sends one GET on a connection and reads its answer whole; only a 200
// counts.
func get(c io.Writer, br *bufio.Reader, host, path, conn string) (int64, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n"+conn+"\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 { // a denial is an answer too
		return 0, fmt.Errorf("GET %s%s: status %d %s", host, path, resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
	}
	return n, nil
}

// newTunnels measures connections that each carry one request: a CONNECT
// (when proxyAddr is set), a whole TLS handshake with serverName (the
// origin, or an inspecting proxy's leaf for it), one GET, close.
func newTunnels(win *window, proxyAddr, target, serverName string, roots *x509.CertPool) result {
	return measure(win, func(int) (int64, error) {
		tc, err := dialTLS(proxyAddr, target, serverName, roots)
		if err != nil {
			return 0, err
		}
		defer tc.Close()
		return get(tc, bufio.NewReader(tc), serverName, "/", "Connection: close\r\n")
	})
}

// tlsKeepAlive issues keep-alive HTTPS requests, each worker on its own
// connection, set up (CONNECT, TLS handshake) before the measurement.
func tlsKeepAlive(win *window, proxyAddr, target, serverName string, roots *x509.CertPool) result {
	conns := make([]*tls.Conn, *conc)
	readers := make([]*bufio.Reader, *conc)
	for i := range conns {
		c, err := dialTLS(proxyAddr, target, serverName, roots)
		if err != nil {
			return result{err: err}
		}
		defer c.Close()
		conns[i], readers[i] = c, bufio.NewReader(c)
	}
	return measure(win, func(w int) (int64, error) {
		return get(conns[w], readers[w], serverName, "/", "")
	})
}

// rawBulk reads what the raw origin writes, through a CONNECT, for
// *duration: bytes with no TLS, the relay's bare copy.
func rawBulk(win *window, proxyAddr, target string) result {
	c, err := dialThrough(proxyAddr, target)
	if err != nil {
		return result{err: err}
	}
	defer c.Close()
	return drain(win, c)
}

// tlsBulk downloads the TLS origin's endless /bulk through a CONNECT for
// *duration, as an HTTPS download runs through a tunnel: the two ends
// encrypt and decrypt every byte, the relay only copies them.
func tlsBulk(win *window, proxyAddr, target, serverName string, roots *x509.CertPool) result {
	tc, err := dialTLS(proxyAddr, target, serverName, roots)
	if err != nil {
		return result{err: err}
	}
	defer tc.Close()
	if _, err := io.WriteString(tc, "GET /bulk HTTP/1.1\r\nHost: "+serverName+"\r\n\r\n"); err != nil {
		return result{err: err}
	}
	br := bufio.NewReaderSize(tc, bulkChunk)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return result{err: err}
	}
	// No resp.Body.Close: it would read the endless body to its end to
	// keep the connection; closing the connection (deferred) ends it.
	if resp.StatusCode != 200 {
		return result{err: fmt.Errorf("GET %s/bulk: status %d", serverName, resp.StatusCode)}
	}
	return drain(win, resp.Body)
}

// drain reads r for *duration, inside win.
func drain(win *window, r io.Reader) result {
	buf := make([]byte, bulkChunk)
	var n int64
	win.open()
	start := time.Now()
	for time.Since(start) < *duration {
		m, err := r.Read(buf)
		n += int64(m)
		if err != nil {
			return result{err: err}
		}
	}
	win.close()
	return result{ops: 1, bytes: n, elapsed: time.Since(start)}
}

package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// The request paths' benchmarks: the shapes of the bench's inspected and
// plain rows, inside one process, against the transparent fixture's
// explicit proxy. Every connection comes from the dialer process, so each
// is attributed, decided and audited as in production. ns/op includes the
// client's and the upstream's work; read the proxy's share in a CPU
// profile (-cpuprofile). Each reports cpu-ns/op, this process's CPU
// (proxy, client and upstream; not the dialer's) per iteration: on a
// shared machine it moves far less than ns/op.

// cpuUsed is the CPU time this process has used so far.
func cpuUsed() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs op in b.Loop and reports its cpu-ns/op.
func loopCPU(b *testing.B, op func()) {
	b.ReportAllocs()
	start := cpuUsed()
	for b.Loop() {
		op()
	}
	b.ReportMetric(float64(cpuUsed()-start)/float64(b.N), "cpu-ns/op")
}

// connectTo opens a CONNECT tunnel to host through the explicit proxy.
func connectTo(b testing.TB, d *dialer, host string) net.Conn {
	c := d.dial(b, d.fx.explicit)
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, d.fx.port, host, d.fx.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
		b.Fatalf("CONNECT %s: %v %v", host, resp, err)
	}
	return c
}

// get sends one request on c, reads its answer from br and checks it is
// the upstream's.
func get(b testing.TB, c io.Writer, br *bufio.Reader, request string) *http.Response {
	if _, err := io.WriteString(c, request); err != nil {
		b.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != tpUpstreamBody {
		b.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	return resp
}

// BenchmarkInspectedKeepAlive is one inspected request per iteration, all
// on one tunnel to api.tp.test: decided by method and path, forwarded over
// the proxy's pooled upstream connection.
func BenchmarkInspectedKeepAlive(b *testing.B) {
	fx := newTPFixture(b)
	d := fx.dialer(b)
	tc := tls.Client(connectTo(b, d, "api.tp.test"), &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
	defer tc.Close()
	br := bufio.NewReader(tc)
	request := "GET /ok/x HTTP/1.1\r\nHost: api.tp.test\r\n\r\n"
	loopCPU(b, func() { get(b, tc, br, request) })
}

// BenchmarkInspectedConnection is a new inspected tunnel per iteration:
// CONNECT, the TLS handshake with the minted leaf, one request, close.
func BenchmarkInspectedConnection(b *testing.B) { benchInspectedConnections(b, nil) }

// BenchmarkInspectedConnectionResumed is BenchmarkInspectedConnection for
// a client that keeps its TLS sessions: each handshake resumes.
func BenchmarkInspectedConnectionResumed(b *testing.B) {
	benchInspectedConnections(b, tls.NewLRUClientSessionCache(1))
}

func benchInspectedConnections(b *testing.B, sessions tls.ClientSessionCache) {
	fx := newTPFixture(b)
	d := fx.dialer(b)
	cfg := &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}, ClientSessionCache: sessions}
	request := "GET /ok/x HTTP/1.1\r\nHost: api.tp.test\r\nConnection: close\r\n\r\n"
	loopCPU(b, func() {
		c := connectTo(b, d, "api.tp.test")
		tc := tls.Client(c, cfg)
		get(b, tc, bufio.NewReader(tc), request)
		c.Close()
	})
}

// BenchmarkPlainKeepAlive is one absolute-form request per iteration, all
// on one connection to the explicit proxy, to web.tp.test (plain HTTP).
func BenchmarkPlainKeepAlive(b *testing.B) {
	fx := newTPFixture(b)
	d := fx.dialer(b)
	c := d.dial(b, fx.explicit)
	defer c.Close()
	br := bufio.NewReader(c)
	request := fmt.Sprintf("GET http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%d\r\n\r\n", fx.port, fx.port)
	loopCPU(b, func() { get(b, c, br, request) })
}

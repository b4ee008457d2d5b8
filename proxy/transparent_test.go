package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/vishvananda/netns"
)

// TestMain lets the test binary double as a client process
// (testutil.ServeClient): the proxy attributes every connection to its
// owner, which must be another process than itself.
func TestMain(m *testing.M) {
	if os.Getenv(dialerEnv) != "" {
		serveDialer()
	}
	testutil.ServeClient()
	os.Exit(m.Run())
}

// The transparent fixture's destinations. Each is a loopback address the
// client dials as it would a synthetic address its DNS gave it, on the one
// port P of the test, and on which a transparent listener serves; the test
// stands in for the redirect by taking the address a connection reached
// for its original destination (Proxy.origin). The upstreams listen on
// other loopback addresses, on the same port P, pinned by the guard.
var (
	tpAPI       = netip.MustParseAddr("127.0.0.2")  // api.tp.test: inspected (GET /ok/** only)
	tpTLS       = netip.MustParseAddr("127.0.0.3")  // tls.tp.test: an opaque TLS tunnel
	tpWeb       = netip.MustParseAddr("127.0.0.4")  // web.tp.test: plain HTTP, GET /ok/** only
	tpSSH       = netip.MustParseAddr("127.0.0.5")  // ssh.tp.test: any bytes, decided on host and port
	tpClosed    = netip.MustParseAddr("127.0.0.6")  // closed.tp.test: no rule
	tpForgotten = netip.MustParseAddr("127.0.0.10") // synthetic, its name forgotten
	tpLiteral   = netip.MustParseAddr("127.0.0.11") // no name: decided as the literal, which a rule allows
	tpStub      = netip.MustParseAddr("127.0.0.12") // stub.tp.test: an opaque tunnel to the stub upstream

	tpTLSUpstream     = netip.MustParseAddr("127.0.0.1") // api. and tls.tp.test's TLS upstream
	tpWebUpstream     = netip.MustParseAddr("127.0.0.7")
	tpSSHUpstream     = netip.MustParseAddr("127.0.0.8")  // greets first, then echoes
	tpStubUpstream    = netip.MustParseAddr("127.0.0.13") // serves each connection with the fixture's stub
	tpBanner          = "220 upstream greets first\r\n"
	tpUpstreamBody    = "hello from upstream"
	tpUpstreamConn    = "X-Upstream-Conn"    // the upstreams' header: the request's source address
	tpUpstreamAsked   = "X-Upstream-Asked"   // and its method and Host, as the upstream read them
	tpUpstreamTrailer = "X-Upstream-Trailer" // and each trailer field the request brought
)

// tpNames is the sandbox's DNS memory: a name for each synthetic address,
// "" for one it has forgotten.
type tpNames map[netip.Addr]string

func (n tpNames) Name(a netip.Addr) (string, bool) {
	name, ok := n[a]
	return name, ok
}

const tpPreset = `package airlock.presets.tp

import data.airlock.lib

exe := [{"path": %[1]q}]

rules := [
	{"name": "api", "binaries": exe, "hosts": ["api.tp.test"], "ports": [%[2]d], "methods": ["GET"], "paths": ["/ok/**"]},
	{"name": "api-post", "binaries": exe, "hosts": ["api.tp.test"], "ports": [%[2]d], "methods": ["POST"], "paths": ["/ok/**"], "query": {"confirm": ["yes"]}},
	{"name": "tls", "binaries": exe, "hosts": ["tls.tp.test"], "ports": [%[2]d]},
	{"name": "web", "binaries": exe, "hosts": ["web.tp.test"], "ports": [%[2]d], "methods": ["GET"], "paths": ["/ok/**"]},
	{"name": "ssh", "binaries": exe, "hosts": ["ssh.tp.test"], "ports": [%[2]d]},
	{"name": "stub", "binaries": exe, "hosts": ["stub.tp.test"], "ports": [%[2]d]},
	{"name": "literal", "binaries": exe, "hosts": [%[3]q], "ports": [%[2]d]},
	{"name": "upstream-literal", "binaries": exe, "hosts": [%[4]q], "ports": [%[2]d]},
]

denies := []

decision := lib.decide(rules, denies)
`

type tpFixture struct {
	p     *Proxy
	port  int
	exe   string // the test binary, which every client process runs
	audit *testutil.Buffer
	// errors holds what the proxy logged at level error.
	errors *testutil.Buffer
	roots  *x509.CertPool // the airlock CA
	upCA   *testca.CA
	// explicit is the explicit proxy's address, serving the same sandbox.
	explicit string
	sb       Sandbox
	serving  sync.WaitGroup
	// stub serves the stub upstream's connections, as a test sets it.
	stub atomic.Pointer[func(net.Conn)]
}

func newTPFixture(tb testing.TB) *tpFixture {
	tb.Helper()
	return newTPFixtureLimits(tb, Limits{})
}

// newTPFixtureLimits is newTPFixture whose proxy has limits (zero fields:
// the defaults), set before it serves.
func newTPFixtureLimits(tb testing.TB, limits Limits) *tpFixture {
	tb.Helper()
	dir := tb.TempDir()
	fx := &tpFixture{audit: &testutil.Buffer{}, errors: &testutil.Buffer{}}
	fx.exe = testExe(tb)
	var err error
	if fx.upCA, err = testca.New(dir); err != nil {
		tb.Fatal(err)
	}
	listeners := fx.listen(tb)

	tlsConfig, err := fx.upCA.ServerConfig("api.tp.test", "tls.tp.test")
	if err != nil {
		tb.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Which of the proxy's upstream connections carried the request,
		// and what it asked for.
		w.Header().Set(tpUpstreamConn, r.RemoteAddr)
		w.Header().Set(tpUpstreamAsked, r.Method+" "+r.Host)
		// And the trailer fields it sent after its body, when it
		// announced any (the body read to its end: never otherwise, an
		// answer before the body is what some tests want).
		if len(r.Trailer) > 0 {
			io.Copy(io.Discard, r.Body)
			for name, v := range r.Trailer {
				w.Header().Add(tpUpstreamTrailer, name+": "+strings.Join(v, ","))
			}
		}
		io.WriteString(w, tpUpstreamBody)
	})
	for _, a := range []netip.Addr{tpTLSUpstream, tpWebUpstream} {
		srv := &http.Server{Handler: hello, ErrorLog: log.New(io.Discard, "", 0)}
		if a == tpTLSUpstream {
			srv.TLSConfig = tlsConfig
			go srv.ServeTLS(listeners[a], "", "")
		} else {
			go srv.Serve(listeners[a])
		}
		tb.Cleanup(func() { srv.Close() })
	}
	greetAndEcho(listeners[tpSSHUpstream])
	testutil.ServeConns(listeners[tpStubUpstream], func(c net.Conn) {
		if serve := fx.stub.Load(); serve != nil {
			(*serve)(c)
		}
	})

	engine := presetEngine(tb, presetBundle(tb, dir, map[string]string{"tp.rego": fmt.Sprintf(tpPreset, fx.exe, fx.port, tpLiteral, tpTLSUpstream)}))
	ca, err := certs.LoadOrCreate(filepath.Join(dir, "ca"), 16)
	if err != nil {
		tb.Fatal(err)
	}
	fx.roots = x509.NewCertPool()
	fx.roots.AppendCertsFromPEM(ca.CertPEM)
	pin := func(host string, a netip.Addr) string { return fmt.Sprintf("%s:%d:%s", host, fx.port, a) }
	guard, err := egress.New(egress.Options{
		// The literal destination is not among them: it is checked as
		// itself, and refused.
		AllowRanges: []netip.Prefix{netip.PrefixFrom(tpTLSUpstream, 32), netip.PrefixFrom(tpWebUpstream, 32), netip.PrefixFrom(tpSSHUpstream, 32),
			netip.PrefixFrom(tpStubUpstream, 32)},
		Resolve: []string{pin("api.tp.test", tpTLSUpstream), pin("tls.tp.test", tpTLSUpstream),
			pin("web.tp.test", tpWebUpstream), pin("ssh.tp.test", tpSSHUpstream), pin("stub.tp.test", tpStubUpstream)},
	})
	if err != nil {
		tb.Fatal(err)
	}
	errorLog := slog.New(slog.NewTextHandler(fx.errors, &slog.HandlerOptions{Level: slog.LevelError}))
	var audit io.Writer = fx.audit
	if _, ok := tb.(*testing.B); ok {
		// A file, as `airlock proxy --audit` writes: held in memory, a
		// benchmark's lines cost it the buffer's growth (13% of an
		// inspected request's profile) in place of the product's write.
		f, err := os.OpenFile(filepath.Join(dir, "audit.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { f.Close() })
		audit = f
	}
	fx.p, err = New(Config{Decider: engine, CA: ca, Guard: guard, UpstreamRoots: fx.upCA.Pool, Audit: audit, Logger: errorLog, Limits: limits})
	if err != nil {
		tb.Fatal(err)
	}
	// Test-only: no redirect brings a connection to a fixture's
	// destination (the client dials it itself), and the addresses it
	// came from and reached are those it sent it from and to, as
	// conntrack would tell after a redirect. Any other listener's are
	// read as in production.
	fx.p.origin = func(st *sandboxState, local, remote netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
		if slices.Contains(tpDestinations, local.Addr()) {
			return remote, local, nil
		}
		return redirected(st, local, remote)
	}
	// The stand-in answers for the fixture's own sandbox, in this
	// namespace, without conntrack (and without root); a sandbox in a
	// namespace a test made is checked as in production.
	fx.p.checkOrigin = func(st *sandboxState) error {
		if !st.NetNS.IsOpen() {
			return nil
		}
		return checkConntrack(st)
	}

	fx.sb = Sandbox{ID: "tp", Kind: "agent", Preset: "tp", Candidates: identity.Tree(os.Getpid()), NetNS: netns.None(),
		Names: tpNames{tpAPI: "api.tp.test", tpTLS: "tls.tp.test", tpWeb: "web.tp.test", tpSSH: "ssh.tp.test", tpClosed: "closed.tp.test", tpForgotten: "",
			tpStub: "stub.tp.test"}}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fx.p.Shutdown(ctx); err != nil {
			tb.Errorf("Shutdown: %v", err)
		}
		fx.serving.Wait()
	})
	for _, a := range tpDestinations {
		fx.serve(tb, listeners[a], fx.sb, transparentServer(fx.p))
	}
	// The explicit proxy, for the same sandbox, to compare with.
	explicit, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	fx.explicit = explicit.Addr().String()
	fx.serve(tb, explicit, fx.sb, explicitServer(fx.p))
	return fx
}

// serve runs serve(ln, sb) until the fixture's Shutdown, which checks that
// it ended without an error.
func (fx *tpFixture) serve(tb testing.TB, ln net.Listener, sb Sandbox, serve func(net.Listener, Sandbox) error) {
	fx.serving.Add(1)
	go func() {
		defer fx.serving.Done()
		if err := serve(ln, sb); err != nil {
			tb.Errorf("serving %s: %v", ln.Addr(), err)
		}
	}()
}

var tpDestinations = []netip.Addr{tpAPI, tpTLS, tpWeb, tpSSH, tpClosed, tpForgotten, tpLiteral, tpStub}

// listen binds every destination and upstream address on one port, the
// port the first gets; another process may hold that port on one of the
// others, so a few ports are tried.
func (fx *tpFixture) listen(tb testing.TB) map[netip.Addr]net.Listener {
	tb.Helper()
	all := append([]netip.Addr{tpTLSUpstream, tpWebUpstream, tpSSHUpstream, tpStubUpstream}, tpDestinations...)
	var lastErr error
	for range 5 {
		got := map[netip.Addr]net.Listener{}
		port := 0
		for _, a := range all {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
			if err != nil {
				lastErr = err
				break
			}
			got[a] = ln
			port = ln.Addr().(*net.TCPAddr).Port
		}
		if len(got) == len(all) {
			fx.port = port
			tb.Cleanup(func() {
				for _, ln := range got {
					ln.Close()
				}
			})
			return got
		}
		for _, ln := range got {
			ln.Close()
		}
	}
	tb.Fatalf("no port free on all of %v: %v", all, lastErr)
	return nil
}

// greetAndEcho is a server-speaks-first upstream: it greets, then echoes.
func greetAndEcho(ln net.Listener) {
	testutil.ServeConns(ln, func(c net.Conn) {
		io.WriteString(c, tpBanner)
		io.Copy(c, c)
	})
}

// client is a connection from another process (the test binary as a relay,
// testutil.ServeClient, run by the command before, if any) to dst on the
// fixture's port: what the test writes and reads, the process sends and
// receives.
func (fx *tpFixture) client(t *testing.T, dst netip.Addr, before ...string) net.Conn {
	t.Helper()
	return fx.clientTo(t, netip.AddrPortFrom(dst, uint16(fx.port)), before...)
}

// clientTo is client to any address and port.
func (fx *tpFixture) clientTo(t *testing.T, dst netip.AddrPort, before ...string) net.Conn {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(before, fx.exe)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), testutil.RelayEnv+"="+dst.String())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	c := &pipeConn{r: outR, w: inW}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close(); cmd.Process.Kill(); cmd.Wait() })
	return c
}

// pipeConn is a relay process's stdout and stdin as a connection.
type pipeConn struct{ r, w *os.File }

func (c *pipeConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *pipeConn) Write(b []byte) (int, error) { return c.w.Write(b) }
func (c *pipeConn) Close() error                { c.w.Close(); return c.r.Close() }
func (c *pipeConn) LocalAddr() net.Addr         { return &net.UnixAddr{Name: "relay", Net: "pipe"} }
func (c *pipeConn) RemoteAddr() net.Addr        { return &net.UnixAddr{Name: "relay", Net: "pipe"} }
func (c *pipeConn) SetDeadline(t time.Time) error {
	c.r.SetDeadline(t)
	return c.w.SetDeadline(t)
}
func (c *pipeConn) SetReadDeadline(t time.Time) error  { return c.r.SetDeadline(t) }
func (c *pipeConn) SetWriteDeadline(t time.Time) error { return c.w.SetDeadline(t) }

// decision waits for the transparent decision line for host and reason: a
// denial's is written after its answer.
func (fx *tpFixture) decision(t *testing.T, host string, reason policies.Reason) map[string]any {
	t.Helper()
	return fx.line(t, AuditMessage, host, reason, func(map[string]any) bool { return true })
}

// line waits for the audit line msg for host and reason that also
// satisfies match.
func (fx *tpFixture) line(t *testing.T, msg, host string, reason policies.Reason, match func(map[string]any) bool) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		raw := fx.audit.String()
		for _, l := range auditLines(t, []byte(raw)) {
			if l["msg"] == msg && l["host"] == host && l["reason"] == string(reason) && match(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s line for %s with reason %s in:\n%s", msg, host, reason, raw)
		}
	}
}

// tpCase is one client of the transparent listener: it connects to dst,
// speaks (or not), and checks what it gets back; the decision line for
// host must then carry reason and say it came through the transparent
// listener.
type tpCase struct {
	name   string
	dst    netip.Addr
	host   string
	reason policies.Reason
	run    func(t *testing.T, fx *tpFixture, c net.Conn)
}

func TestServeTransparent(t *testing.T) {
	fx := newTPFixture(t)
	for _, tc := range []tpCase{
		{"tls allowed: opaque tunnel", tpTLS, "tls.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			resp, issuer := fx.httpsGet(t, c, "tls.tp.test", []string{"http/1.1"}, "/anything")
			wantBody(t, resp, http.StatusOK, tpUpstreamBody)
			if issuer != fx.upCA.Cert.Subject.CommonName {
				t.Fatalf("the client's TLS peer was issued by %q; want the upstream's own (an opaque tunnel)", issuer)
			}
		}},
		{"tls inspected: method rule allows", tpAPI, "api.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			resp, issuer := fx.httpsGet(t, c, "api.tp.test", []string{"http/1.1"}, "/ok/x")
			wantBody(t, resp, http.StatusOK, tpUpstreamBody)
			if issuer == fx.upCA.Cert.Subject.CommonName {
				t.Fatalf("the client's TLS peer is the upstream; want the proxy's leaf (inspected)")
			}
		}},
		{"tls inspected: path rule denies", tpAPI, "api.tp.test", policies.ReasonPathNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			resp, _ := fx.httpsGet(t, c, "api.tp.test", []string{"http/1.1"}, "/no")
			wantDenial(t, resp, http.StatusForbidden, policies.ReasonPathNotAllowed, "api.tp.test")
		}},
		{"tls server name is another host", tpAPI, "api.tp.test", policies.ReasonHostMismatch, func(t *testing.T, fx *tpFixture, c net.Conn) {
			resp, _ := fx.httpsGet(t, c, "tls.tp.test", []string{"http/1.1"}, "/ok/x")
			wantDenial(t, resp, http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "api.tp.test")
		}},
		{"tls denied, http/1.1 offered: 403 after a verified handshake", tpClosed, "closed.tp.test", policies.ReasonHostNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			resp, _ := fx.httpsGet(t, c, "closed.tp.test", []string{"http/1.1"}, "/")
			wantDenial(t, resp, http.StatusForbidden, policies.ReasonHostNotAllowed, "closed.tp.test")
		}},
		{"tls denied, no ALPN: 403", tpClosed, "closed.tp.test", policies.ReasonHostNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			resp, _ := fx.httpsGet(t, c, "closed.tp.test", nil, "/")
			wantDenial(t, resp, http.StatusForbidden, policies.ReasonHostNotAllowed, "closed.tp.test")
		}},
		{"tls denied, a wildcard server name: no leaf for it, reset", tpClosed, "closed.tp.test", policies.ReasonHostNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			tc := tls.Client(c, &tls.Config{ServerName: "*.closed.tp.test", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err := tc.Handshake(); err == nil {
				t.Fatalf("handshake completed with a leaf for %q; want the connection reset", tc.ConnectionState().PeerCertificates[0].DNSNames)
			}
			wantNothing(t, c)
		}},
		{"tls denied, only h2 offered: reset", tpClosed, "closed.tp.test", policies.ReasonHostNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			tc := tls.Client(c, &tls.Config{ServerName: "closed.tp.test", RootCAs: fx.roots, NextProtos: []string{"h2"}})
			if err := tc.Handshake(); err == nil {
				t.Fatalf("handshake for h2 only completed (%q); want the connection reset", tc.ConnectionState().NegotiatedProtocol)
			}
			wantNothing(t, c)
		}},
		{"plain http allowed", tpWeb, "web.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			wantBody(t, httpGet(t, c, fmt.Sprintf("web.tp.test:%d", fx.port), "/ok/x"), http.StatusOK, tpUpstreamBody)
		}},
		{"plain http denied: 403 JSON", tpWeb, "web.tp.test", policies.ReasonPathNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			wantDenial(t, httpGet(t, c, fmt.Sprintf("web.tp.test:%d", fx.port), "/no"), http.StatusForbidden, policies.ReasonPathNotAllowed, "web.tp.test")
		}},
		{"plain http Host is another name", tpWeb, "web.tp.test", policies.ReasonHostMismatch, func(t *testing.T, fx *tpFixture, c net.Conn) {
			wantDenial(t, httpGet(t, c, "api.tp.test", "/ok/x"), http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "web.tp.test")
		}},
		{"ssh-like client speaks first: allowed by host and port", tpSSH, "ssh.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			io.WriteString(c, "SSH-2.0-OpenSSH_9.6 Ubuntu\r\n")
			want := tpBanner + "SSH-2.0-OpenSSH_9.6 Ubuntu\r\n"
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
				t.Fatalf("read %q, %v; want the upstream's greeting and the banner echoed", got, err)
			}
		}},
		{"http after blank lines is http: read, not tunnelled", tpSSH, "ssh.tp.test", policies.ReasonInvalidRequest, func(t *testing.T, fx *tpFixture, c net.Conn) {
			// A server may skip the blank lines (RFC 9112, 2.2) and serve
			// the request under any Host: it is HTTP, and net/http,
			// which does not skip them, refuses it.
			io.WriteString(c, "\r\n\r\nGET /ok/x HTTP/1.1\r\nHost: other.test\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("answer %v, %v; want 400 (tunnelled, the upstream would greet)", resp, err)
			}
		}},
		{"http with tabs between its words is http: read, not tunnelled", tpSSH, "ssh.tp.test", policies.ReasonInvalidRequest, func(t *testing.T, fx *tpFixture, c net.Conn) {
			// Tomcat reads it as a request (RFC 9112 3 allows the tab),
			// under its Host.
			io.WriteString(c, "GET\t/ok/x\tHTTP/1.1\r\nHost: other.test\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("answer %v, %v; want 400 (tunnelled, the upstream would greet)", resp, err)
			}
		}},
		{"ssh-like client speaks first: denied by host, reset", tpClosed, "closed.tp.test", policies.ReasonHostNotAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			io.WriteString(c, "SSH-2.0-OpenSSH_9.6 Ubuntu\r\n")
			wantNothing(t, c)
		}},
		{"ssh-like client to an inspected host: reset", tpAPI, "api.tp.test", policies.ReasonInvalidRequest, func(t *testing.T, fx *tpFixture, c net.Conn) {
			io.WriteString(c, "SSH-2.0-OpenSSH_9.6 Ubuntu\r\n")
			wantNothing(t, c)
		}},
		{"server speaks first: the silent client is tunnelled", tpSSH, "ssh.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			br := bufio.NewReader(c)
			got, err := br.ReadString('\n')
			if err != nil || got != tpBanner {
				t.Fatalf("read %q, %v; want the upstream's greeting", got, err)
			}
			// Then the client speaks, and the tunnel carries it.
			io.WriteString(c, "HELO client.test\r\n")
			if got, err = br.ReadString('\n'); err != nil || got != "HELO client.test\r\n" {
				t.Fatalf("read %q, %v; want the client's line echoed by the upstream", got, err)
			}
		}},
		// Decided on host and port (allowed); the close line refuses.
		{"silent past the wait, then TLS for another host: still refused", tpTLS, "tls.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			time.Sleep(clientFirstWait + 300*time.Millisecond)
			resp, _ := fx.httpsGet(t, c, "api.tp.test", []string{"http/1.1"}, "/no")
			wantDenial(t, resp, http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "tls.tp.test")
		}},
		{"silent past the wait, then HTTP: read as requests, Host pinned", tpSSH, "ssh.tp.test", policies.ReasonAllowed, func(t *testing.T, fx *tpFixture, c net.Conn) {
			br := bufio.NewReader(c)
			if got, err := br.ReadString('\n'); err != nil || got != tpBanner {
				t.Fatalf("read %q, %v; want the upstream's greeting", got, err)
			}
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to a late HTTP request: %v", err)
			}
			wantDenial(t, resp, http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "ssh.tp.test")
		}},
		{"forgotten synthetic address", tpForgotten, tpForgotten.String(), policies.ReasonNameForgotten, func(t *testing.T, fx *tpFixture, c net.Conn) {
			wantDenial(t, httpGet(t, c, "web.tp.test", "/ok/x"), http.StatusMisdirectedRequest, policies.ReasonNameForgotten, tpForgotten.String())
		}},
		{"literal address decided as the literal", tpLiteral, tpLiteral.String(), policies.ReasonSSRF, func(t *testing.T, fx *tpFixture, c net.Conn) {
			// The rule naming the literal allows it; the guard then
			// checks the literal itself, a loopback address.
			wantDenial(t, httpGet(t, c, netip.AddrPortFrom(tpLiteral, uint16(fx.port)).String(), "/"), http.StatusForbidden, policies.ReasonSSRF, tpLiteral.String())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, fx, fx.client(t, tc.dst))
			l := fx.decision(t, tc.host, tc.reason)
			if l["via"] != "transparent" || l["binary"] != fx.exe {
				t.Fatalf("decision line %v; want via transparent, binary %s", l, fx.exe)
			}
		})
	}
}

// httpsGet does a TLS handshake as serverName, offering protos, verified
// against both the airlock CA and the upstream's, and sends GET path; it
// returns the answer and who issued the peer's certificate.
func (fx *tpFixture) httpsGet(t *testing.T, c net.Conn, serverName string, protos []string, path string) (*http.Response, string) {
	t.Helper()
	roots := fx.roots.Clone()
	roots.AddCert(fx.upCA.Cert)
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: protos})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake as %s: %v", serverName, err)
	}
	issuer := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName
	return httpGet(t, tc, serverName, path), issuer
}

// httpGet sends GET path with host as Host on c and reads the answer.
func httpGet(t *testing.T, c net.Conn, host, path string) *http.Response {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s (Host %s): no answer: %v", path, host, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func wantBody(t *testing.T, resp *http.Response, status int, body string) {
	t.Helper()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || string(got) != body {
		t.Fatalf("answer %d %q; want %d %q", resp.StatusCode, got, status, body)
	}
}

func wantDenial(t *testing.T, resp *http.Response, status int, reason policies.Reason, host string) {
	t.Helper()
	var d Denial
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("answer %d: body is no JSON denial: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != status || d.Reason != string(reason) || d.Host != host || resp.Header.Get(ReasonHeader) != string(reason) {
		t.Fatalf("answer %d %+v; want %d %s for host %s", resp.StatusCode, d, status, reason, host)
	}
}

// wantNothing checks that the connection ends without a byte for the
// client: the proxy reset it.
func wantNothing(t *testing.T, c net.Conn) {
	t.Helper()
	if got, _ := io.ReadAll(c); len(got) > 0 {
		t.Fatalf("the client read %q; want the connection ended with nothing", got)
	}
}

// peek tells what a connection's first bytes speak, within its bounds,
// and gives them back whole: a ClientHello (its server name and ALPN list)
// as crypto/tls reads it, an HTTP/1 request line, anything else; a
// beginning that could be a request line but runs past the header limit
// is anything else, and a ClientHello crypto/tls cannot read is an error.
func TestPeek(t *testing.T) {
	// MaxHeaderBytes 64, and 4096 for the request line: 4160 bytes at most.
	p := &Proxy{cfg: Config{Limits: Limits{MaxHeaderBytes: 64, HandshakeTimeout: 10 * time.Second, ReadHeaderTimeout: 10 * time.Second}}}
	// Its target not a path yet, nor its version read: undecided until
	// the limit.
	long := "GET " + strings.Repeat("a", 8000)
	for _, tc := range []struct {
		name  string
		send  func(c net.Conn)
		proto protocol
		early int // -1: all that was sent
		sni   string
		alpn  []string
		err   string
	}{
		{"tls", func(c net.Conn) {
			tls.Client(c, &tls.Config{ServerName: "api.tp.test", NextProtos: []string{"h2", "http/1.1"}}).Handshake()
		}, speaksTLS, -1, "api.tp.test", []string{"h2", "http/1.1"}, ""},
		{"http", func(c net.Conn) { io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n") }, speaksHTTP, -1, "", nil, ""},
		{"ssh", func(c net.Conn) { io.WriteString(c, "SSH-2.0-Go\r\n") }, speaksOther, -1, "", nil, ""},
		// Read as HTTP, which refuses it (431): never tunnelled.
		{"request line over the limit", func(c net.Conn) { io.WriteString(c, long) }, speaksHTTP, 64 + 4096, "", nil, ""},
		{"not a ClientHello", func(c net.Conn) { c.Write([]byte{0x16, 3, 1, 0, 4, 9, 9, 9, 9}) }, speaksOther, 0, "", nil, "no ClientHello could be read"},
		{"an SSL 2.0-compatible ClientHello", func(c net.Conn) { c.Write(sslv2Hello) }, speaksOther, 0, "", nil, "SSL 2.0-compatible ClientHello"},
		{"its first byte, then the end", func(c net.Conn) { c.Write(sslv2Hello[:1]); c.Close() }, speaksOther, 0, "", nil, "could still be an SSL 2.0-compatible"},
		// OpenSSL takes a challenge of any length (and keeps 32 bytes).
		{"an SSL 2.0-compatible ClientHello, a 64-byte challenge", func(c net.Conn) {
			c.Write(slices.Concat([]byte{0x80, 46 + 48}, sslv2Hello[2:9], []byte{0, 64}, sslv2Hello[11:], make([]byte, 48)))
		}, speaksOther, 0, "", nil, "SSL 2.0-compatible ClientHello"},
		// A memcached binary request.
		{"the high bit, then no ClientHello", func(c net.Conn) { c.Write([]byte{0x80, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5}) }, speaksOther, -1, "", nil, ""},
		// Protocols that begin with the high bit and a 1 as the hello
		// does, the rest of their first bytes no hello's: Thrift's compact
		// call "get" (sequence id 1), msgpack-rpc's request 1, telnet's
		// IAC DO ECHO.
		{"thrift compact", func(c net.Conn) { c.Write([]byte{0x82, 0x21, 0x01, 0x03, 'g', 'e', 't', 0x15, 0x02, 0x00, 0x00, 0x00}) }, speaksOther, -1, "", nil, ""},
		{"msgpack-rpc", func(c net.Conn) { c.Write([]byte{0x94, 0x00, 0x01, 0xa3, 'a', 'd', 'd', 0x92, 0x01, 0x02, 0x00, 0x00}) }, speaksOther, -1, "", nil, ""},
		{"telnet", func(c net.Conn) {
			c.Write([]byte{0xff, 0xfd, 0x01, 0xff, 0xfb, 0x1f, 0xff, 0xfb, 0x20, 0xff, 0xfb, 0x18})
		}, speaksOther, -1, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := testutil.TCPPair(t)
			sent := &testutil.Buffer{}
			go tc.send(&teeConn{Conn: client, w: sent})
			o, err := p.peek(server, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("peek = %+v, %v; want an error saying %q", o, err, tc.err)
				}
				return
			}
			want := len(sent.String())
			if tc.early >= 0 {
				want = tc.early
			}
			if err != nil || o.proto != tc.proto || o.serverName != tc.sni || !slices.Equal(o.protos, tc.alpn) ||
				len(o.early) != want || !strings.HasPrefix(sent.String(), string(o.early)) {
				t.Fatalf("peek = proto %d, %d bytes, SNI %q, ALPN %q, %v; want proto %d, %d bytes of what was sent, SNI %q, ALPN %q",
					o.proto, len(o.early), o.serverName, o.protos, err, tc.proto, want, tc.sni, tc.alpn)
			}
		})
	}
}

// sslv2Hello is an SSL 2.0-compatible ClientHello for TLS 1.0, which
// OpenSSL servers at a low security level take: no server name.
var sslv2Hello = slices.Concat([]byte{0x80, 46, 1, 3, 1, 0, 21, 0, 0, 0, 16},
	[]byte{0, 0, 0x2f, 0, 0, 0x35, 0, 0, 0x0a, 0, 0, 0x05, 0, 0, 0x04, 0, 0, 0xff, 0, 0xc0, 0x14}, make([]byte, 16))

// teeConn copies what is written to it to w.
type teeConn struct {
	net.Conn
	w io.Writer
}

func (c *teeConn) Write(b []byte) (int, error) {
	c.w.Write(b)
	return c.Conn.Write(b)
}

// An opaque CONNECT tunnel is looked at as it opens, as a transparent
// connection is: a TLS server name must name the CONNECT's host (the
// tunnel would otherwise reach another host on the same front, decided as
// this one), plain HTTP is read as requests with their Host pinned, and a
// server-first protocol still gets its greeting.
func TestOpaqueConnectChecksWhatOpensIt(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	open := func(t *testing.T, host string) net.Conn {
		c := connectTo(t, d, host)
		t.Cleanup(func() { c.Close() })
		return c
	}
	// openBy is a connection to tls.tp.test by path: a CONNECT through
	// the explicit listener, or one redirected to the transparent one.
	openBy := func(t *testing.T, path string) net.Conn {
		if path == "explicit" {
			return open(t, "tls.tp.test")
		}
		c := d.dial(t, fmt.Sprintf("%s:%d", tpTLS, fx.port))
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Run("TLS for its host", func(t *testing.T) {
		resp, _ := fx.httpsGet(t, open(t, "tls.tp.test"), "tls.tp.test", []string{"http/1.1"}, "/any")
		wantBody(t, resp, http.StatusOK, tpUpstreamBody)
	})
	t.Run("TLS for another host", func(t *testing.T) {
		resp, _ := fx.httpsGet(t, open(t, "tls.tp.test"), "api.tp.test", []string{"http/1.1"}, "/no")
		wantDenial(t, resp, http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "tls.tp.test")
	})
	t.Run("plain HTTP with another Host", func(t *testing.T) {
		wantDenial(t, httpGet(t, open(t, "tls.tp.test"), "other.test", "/"), http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "tls.tp.test")
	})
	// To an address a rule allows, TLS sends no name; one that does is
	// decided by no rule of that name (its deny included): refused.
	t.Run("TLS for a name to an address", func(t *testing.T) {
		resp, _ := fx.httpsGet(t, open(t, tpTLSUpstream.String()), "tls.tp.test", []string{"http/1.1"}, "/no")
		wantDenial(t, resp, http.StatusMisdirectedRequest, policies.ReasonHostMismatch, tpTLSUpstream.String())
	})
	// Without a name, a shared front serves its default host, which may
	// be any of its tenants: to a name, a ClientHello must carry one.
	for _, path := range []string{"explicit", "transparent"} {
		t.Run("TLS without a server name, "+path, func(t *testing.T) {
			c := openBy(t, path)
			// The refusal's leaf is for the host: verified as that.
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
				VerifyConnection: func(cs tls.ConnectionState) error {
					_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: "tls.tp.test", Roots: fx.roots})
					return err
				}})
			wantDenial(t, httpGet(t, tc, "tls.tp.test", "/"), http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "tls.tp.test")
		})
	}
	// The name goes on as the client sent it: it must be the host's but
	// for ASCII case. IDNA maps a soft hyphen, a zero-width space or a
	// fullwidth letter to the host, and a front matching the name as sent
	// would serve its default tenant.
	t.Run("TLS for its host in capitals", func(t *testing.T) {
		resp, _ := fx.httpsGet(t, open(t, "tls.tp.test"), "TLS.TP.test", []string{"http/1.1"}, "/any")
		wantBody(t, resp, http.StatusOK, tpUpstreamBody)
	})
	for _, name := range []string{"tls\u00ad.tp.test", "tls.tp\u200b.test", "\uff54ls.tp.test"} {
		for _, path := range []string{"explicit", "transparent"} {
			t.Run(fmt.Sprintf("TLS for %+q, %s", name, path), func(t *testing.T) {
				tc := tls.Client(openBy(t, path), &tls.Config{ServerName: name, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
					VerifyConnection: func(cs tls.ConnectionState) error {
						_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: "tls.tp.test", Roots: fx.roots})
						return err
					}})
				wantDenial(t, httpGet(t, tc, "tls.tp.test", "/"), http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "tls.tp.test")
			})
		}
	}
	// Nor can an SSL 2.0-compatible ClientHello carry one, which crypto/tls
	// cannot read and OpenSSL at a low security level takes: refused.
	for _, path := range []string{"explicit", "transparent"} {
		t.Run("an SSL 2.0-compatible ClientHello, "+path, func(t *testing.T) {
			c := openBy(t, path)
			msg, via := AuditCloseMessage, any(nil)
			if path == "transparent" {
				msg, via = AuditMessage, "transparent"
			}
			c.Write(sslv2Hello)
			wantNothing(t, c)
			fx.line(t, msg, "tls.tp.test", policies.ReasonInvalidRequest, func(l map[string]any) bool {
				detail, _ := l["detail"].(string)
				return l["via"] == via && strings.Contains(detail, "SSL 2.0-compatible ClientHello")
			})
		})
	}
	// A Go front (crypto/tls) skips a warning alert sent before the
	// ClientHello and reads the ClientHello after it: so does the check,
	// on the explicit and the transparent path alike.
	alert := []byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x01, 90} // warning, user_canceled
	for _, path := range []string{"explicit", "transparent"} {
		t.Run("an alert, then TLS for another host, "+path, func(t *testing.T) {
			c := openBy(t, path)
			c.Write(alert)
			resp, _ := fx.httpsGet(t, c, "api.tp.test", []string{"http/1.1"}, "/no")
			wantDenial(t, resp, http.StatusMisdirectedRequest, policies.ReasonHostMismatch, "tls.tp.test")
		})
	}
	// A request line servers read though it is loosely written (two
	// spaces, a trailing one, HTTP/2's preface) is read as a request
	// too: refused, never tunnelled past the Host pin; so is one sent a
	// byte at a time.
	for _, head := range []string{"GET  / HTTP/1.1", "GET / HTTP/1.1 ", "GET / HTTP/1.2", "PRI * HTTP/2.0"} {
		t.Run("loose: "+head, func(t *testing.T) {
			c := open(t, "tls.tp.test")
			io.WriteString(c, head+"\r\nHost: other.test\r\n\r\n")
			resp, den := denialOn(t, c)
			if resp.StatusCode < 400 || den.Reason == "" {
				t.Fatalf("answer %d %+v; want a refusal", resp.StatusCode, den)
			}
		})
	}
	t.Run("a byte at a time", func(t *testing.T) {
		c := open(t, "tls.tp.test")
		io.WriteString(c, "G")
		time.Sleep(clientFirstWait + 200*time.Millisecond)
		io.WriteString(c, "ET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
		resp, den := denialOn(t, c)
		if resp.StatusCode < 400 || den.Reason == "" {
			t.Fatalf("answer %d %+v; want a refusal", resp.StatusCode, den)
		}
	})
	t.Run("server first", func(t *testing.T) {
		// The greeting may come in the same read as the 200.
		c := d.dial(t, fx.explicit)
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT ssh.tp.test:%d HTTP/1.1\r\nHost: ssh.tp.test:%[1]d\r\n\r\n", fx.port)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT ssh.tp.test: %v %v", resp, err)
		}
		if got, err := br.ReadString('\n'); err != nil || got != tpBanner {
			t.Fatalf("read %q, %v; want the upstream's greeting", got, err)
		}
		io.WriteString(c, "HELO client.test\r\n")
		if got, err := br.ReadString('\n'); err != nil || got != "HELO client.test\r\n" {
			t.Fatalf("read %q, %v; want the client's line echoed", got, err)
		}
		// Half-closed, the echo ends, and the tunnel with it. The
		// greeting, relayed before the client spoke, is counted.
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, br)
		want := float64(len(tpBanner) + len("HELO client.test\r\n"))
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			raw := fx.audit.String()
			for _, l := range auditLines(t, []byte(raw)) {
				if l["msg"] == AuditCloseMessage && l["host"] == "ssh.tp.test" && l["via"] == nil {
					if l["bytes_down"] != want {
						t.Fatalf("close line %v; want bytes_down %v, the greeting and the echo", l, want)
					}
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no close line for ssh.tp.test in:\n%s", raw)
			}
		}
	})
}

func TestRequestLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"GET / HTTP/1.1\r\n", lineIs},
		{"PROPFIND /x HTTP/1.0\n", lineIs},
		{"GET / HTTP/1.1", lineIs},
		{"GE", lineMayBe},
		{"GET /index", lineIs},
		{"GET index HTT", lineMayBe},
		{"HELO mail.example\r\n", lineIsNot},
		{"0033git-upload-pack /project.git\x00host=git.example\x00", lineIsNot},
		{"0033git-upload-pack /project.git", lineMayBe},
		{"0000git-x /admin HTTP/1.1\r\nHost: other.test\r\n\r\n", lineIs},
		{"0000git-x /admin\r\n\x00", lineIs},
		{"SSH-2.0-OpenSSH_9.6 Ubuntu-3ubuntu13\r\n", lineIsNot},
		{"SSH-2.0-Go\r\n", lineIsNot},
		{"\x00\x00\x00\x08\x04\xd2\x16\x2f", lineIsNot}, // PostgreSQL's SSLRequest
		{"GET /x\r\n", lineIs},                          // HTTP/0.9, which nginx serves from its default host
		// What servers read as requests, however loosely written, is
		// read as one (and refused by net/http where it cannot be).
		{"GET / HTTP/2.0\r\n", lineIs},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", lineIs},
		{"GET  / HTTP/1.1\r\n", lineIs},
		{"GET / HTTP/1.1 \r\n", lineIs},
		{"GET / HTTP/1.2\r\n", lineIs},
		{"GET / HTTP/1.1\rX", lineIs},
		{"\r\nGET / HTTP/1.1\r\n", lineIs},
		{"\n\r\n\r\nGET /", lineIs},
		{"\n\r\n\r\nGET ", lineMayBe},
		{"\r\n", lineMayBe},
		{"\r\n\x00\x01", lineIsNot},
		{"GET\t/\tHTTP/1.1\r\n", lineIs},
		{" GET / HTTP/1.1\r\n", lineIs},
		{"GET\v*\r\n", lineIs},
		{"GET http://other.example/ HTTP/1.1\r\n", lineIs},
		{"get / http/1.1\r\n", lineIs},
	} {
		if got := requestLine([]byte(tc.in)); got != tc.want {
			t.Errorf("requestLine(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// egressServer serves a listener, with serve, as the only one of its
// sandbox.
func egressServer(p *Proxy, serve func(*Egress, net.Listener) error) func(net.Listener, Sandbox) error {
	return func(ln net.Listener, sb Sandbox) error {
		e, err := p.Open(sb)
		if err != nil {
			return err
		}
		defer e.Close()
		return serve(e, ln)
	}
}

// transparentServer and explicitServer are egressServer's two kinds.
func transparentServer(p *Proxy) func(net.Listener, Sandbox) error {
	return egressServer(p, (*Egress).ServeTransparent)
}

func explicitServer(p *Proxy) func(net.Listener, Sandbox) error {
	return egressServer(p, (*Egress).Serve)
}

// An upstream that answers before the request's body ends leaves the
// transport reading the body while the proxy answers and closes: the
// client reads the answer and goes. Both the transport's read and the
// close's (linger) end without the proxy coming down, plain and TLS, and
// it serves the next connection.
func TestEarlyAnswerThenClientGoes(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	for _, tc := range []struct {
		name string
		dst  netip.Addr
		host string
	}{{"plain", tpWeb, "web.tp.test"}, {"tls", tpAPI, "api.tp.test"}} {
		t.Run(tc.name, func(t *testing.T) {
			for range 5 {
				raw := d.dial(t, fmt.Sprintf("%s:%d", tc.dst, fx.port))
				var c net.Conn = raw
				if tc.name == "tls" {
					c = tls.Client(raw, &tls.Config{ServerName: tc.host, RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
				}
				fmt.Fprintf(c, "GET /ok/x HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 1000000\r\n\r\n0123456789", tc.host, fx.port)
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK || !resp.Close {
					t.Fatalf("early answer %d, close %v; want 200 and the connection closed", resp.StatusCode, resp.Close)
				}
				raw.Close()
			}
			if tc.name == "plain" {
				wantBody(t, httpGet(t, d.dial(t, fmt.Sprintf("%s:%d", tc.dst, fx.port)), fmt.Sprintf("%s:%d", tc.host, fx.port), "/ok/x"), http.StatusOK, tpUpstreamBody)
			} else {
				resp, _ := fx.httpsGet(t, d.dial(t, fmt.Sprintf("%s:%d", tc.dst, fx.port)), tc.host, []string{"http/1.1"}, "/ok/x")
				wantBody(t, resp, http.StatusOK, tpUpstreamBody)
			}
			if logged := fx.errors.String(); strings.Contains(logged, "panic") {
				t.Fatalf("the proxy panicked serving a connection:\n%s", logged)
			}
		})
	}
}

// awaitClient waits for a silent client's first bytes while its upstream
// speaks: an upstream that greets and ends hands its end on at once (the
// relay passes it to the client), an upstream that goes on talking keeps
// the wait from being idle, and a wait where neither side moves ends as
// idle, never relayed unchecked.
func TestAwaitClient(t *testing.T) {
	p := &Proxy{cfg: Config{Limits: Limits{MaxHeaderBytes: 64, TunnelIdleTimeout: 500 * time.Millisecond,
		HandshakeTimeout: 10 * time.Second, ReadHeaderTimeout: 10 * time.Second}}}
	t.Run("upstream greets and ends", func(t *testing.T) {
		_, client := testutil.TCPPair(t)
		up, upstream := testutil.TCPPair(t)
		io.WriteString(up, tpBanner)
		up.Close()
		first, end, err := p.awaitClient(client, upstream)
		if end != nil || err != nil || !first.silent() || first.greeted != int64(len(tpBanner)) {
			t.Fatalf("awaitClient = %+v, %v, %v; want silent, the greeting counted, the end handed on", first, end, err)
		}
	})
	t.Run("neither side moves", func(t *testing.T) {
		_, client := testutil.TCPPair(t)
		_, upstream := testutil.TCPPair(t)
		if _, end, err := p.awaitClient(client, upstream); !errors.Is(end, errIdleTunnel) || err != nil {
			t.Fatalf("awaitClient = %v, %v; want it ended as idle", end, err)
		}
	})
	t.Run("upstream talks, then the client speaks", func(t *testing.T) {
		cl, client := testutil.TCPPair(t)
		up, upstream := testutil.TCPPair(t)
		go io.Copy(io.Discard, cl)
		go func() {
			for range 10 { // 1s of talk, twice the idle limit
				io.WriteString(up, "tick\n")
				time.Sleep(100 * time.Millisecond)
			}
			io.WriteString(cl, "SSH-2.0-Go\r\n")
		}()
		first, end, err := p.awaitClient(client, upstream)
		if end != nil || err != nil || string(first.early) != "SSH-2.0-Go\r\n" || first.greeted != 50 {
			t.Fatalf("awaitClient = %+v, %v, %v; want the client's banner, after 50 bytes of talk", first, end, err)
		}
	})
	t.Run("upstream floods a client that reads nothing", func(t *testing.T) {
		_, client := testutil.TCPPair(t) // its peer never reads
		up, upstream := testutil.TCPPair(t)
		go func() {
			chunk := make([]byte, 1<<20)
			for {
				if _, err := up.Write(chunk); err != nil {
					return
				}
			}
		}()
		done := make(chan error, 1)
		go func() {
			_, end, _ := p.awaitClient(client, upstream)
			done <- end
		}()
		select {
		case end := <-done:
			if !errors.Is(end, errIdleTunnel) {
				t.Fatalf("awaitClient ended with %v; want idle: the client took nothing for the idle limit", end)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("awaitClient still waits on a client that reads nothing, 40 idle limits on")
		}
	})
	t.Run("upstream fails with a timeout of its own", func(t *testing.T) {
		_, client := testutil.TCPPair(t)
		up, upstream := testutil.TCPPair(t)
		io.WriteString(up, tpBanner)
		first, end, err := p.awaitClient(client, timingOut{upstream})
		if _, ok := errors.AsType[*upstreamAbort](end); !ok || err != nil || first.greeted != int64(len(tpBanner)) {
			t.Fatalf("awaitClient = %+v, %v, %v; want the greeting counted and the upstream's failure as the end, not a wait for idle", first, end, err)
		}
	})
	t.Run("upstream greets and resets", func(t *testing.T) {
		_, client := testutil.TCPPair(t)
		up, upstream := testutil.TCPPair(t)
		io.WriteString(up, tpBanner)
		up.(*net.TCPConn).SetLinger(0)
		up.Close()
		first, end, err := p.awaitClient(client, upstream)
		if _, ok := errors.AsType[*upstreamAbort](end); !ok || err != nil || first.greeted != int64(len(tpBanner)) {
			t.Fatalf("awaitClient = %+v, %v, %v; want the greeting counted and the upstream's reset as the end (passed on as one)", first, end, err)
		}
	})
	t.Run("upstream streams, then the client speaks", func(t *testing.T) {
		cl, client := testutil.TCPPair(t)
		up, upstream := testutil.TCPPair(t)
		stream := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, past the first buffer
		got := make(chan []byte, 1)
		go func() {
			b := make([]byte, len(stream))
			io.ReadFull(cl, b)
			got <- b
			io.WriteString(cl, "SSH-2.0-Go\r\n")
		}()
		go up.Write(stream)
		first, end, err := p.awaitClient(client, upstream)
		if end != nil || err != nil || string(first.early) != "SSH-2.0-Go\r\n" || first.greeted != int64(len(stream)) {
			t.Fatalf("awaitClient = %v %q, %v, %v; want the client's banner, after the whole stream", first.greeted, first.early, end, err)
		}
		if !bytes.Equal(<-got, stream) {
			t.Fatal("the client got the stream altered")
		}
	})
}

// timingOut is an upstream whose read fails with ETIMEDOUT (a keepalive
// that went unanswered) once what was sent is read: an error that is a
// timeout, and no deadline's.
type timingOut struct{ net.Conn }

func (c timingOut) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := c.Conn.Read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}
	}
	return n, err
}

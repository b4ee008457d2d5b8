package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/identity"
)

// fuzzHost is the inspected host of the fuzz policy, served by a loopback
// upstream (pinned, never resolved).
const fuzzHost = "api.fuzz.test"

// fuzzPreset allows reads under /repos and /search, POSTs to /upload/* with
// mode=safe only, and a WebSocket at /ws, to curl; a deny rule covers
// /repos/*/admin. Every rule restricts requests, so the host is inspected.
const fuzzPreset = `package airlock.presets.fuzz

import data.airlock.lib

exe := [{"path": "/usr/bin/curl"}]

rules := [
	{"name": "read", "binaries": exe, "hosts": [%[1]q], "ports": [443, %[2]d], "methods": "read-only", "paths": ["/repos/**", "/search/*"]},
	{"name": "upload", "binaries": exe, "hosts": [%[1]q], "ports": [443, %[2]d], "methods": ["POST"], "paths": ["/upload/*"], "query": {"mode": ["safe"]}},
	{"name": "ws", "binaries": exe, "hosts": [%[1]q], "ports": [443, %[2]d], "methods": ["GET"], "paths": ["/ws"], "websocket": true},
]

denies := [{"name": "no-admin", "hosts": [%[1]q], "paths": ["/repos/*/admin/**"]}]

decision := lib.decide(rules, denies)
`

// fuzzFixture is a real Proxy with a real policy engine, a client
// connection already attributed to curl, and an upstream for fuzzHost that
// checks every request it receives against the oracle.
type fuzzFixture struct {
	p      *Proxy
	cc     *clientConn
	oracle *policies.Engine // uncached: `airlock policy eval`
	port   int              // the upstream's
	roots  *certs.CA        // the proxy's CA, which clients trust

	// hangUp makes the upstream close each connection as soon as a
	// request's header has arrived, answering nothing.
	hangUp atomic.Bool
	// released, when set, makes the upstream answer a request with a
	// stream that says nothing more, held until the request is gone
	// (its connection closed), then told here.
	released chan struct{}
	// answer, when set, answers each request in place of "ok".
	answer atomic.Pointer[http.HandlerFunc]

	mu         sync.Mutex
	violations []string
}

func newFuzzFixture(tb testing.TB) *fuzzFixture {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	fx := &fuzzFixture{}

	upCA, err := testca.New(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tlsConfig, err := upCA.ServerConfig(fuzzHost)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(fx.upstream), TLSConfig: tlsConfig, ErrorLog: log.New(io.Discard, "", 0)}
	go up.ServeTLS(ln, "", "")
	tb.Cleanup(func() { up.Close() })
	fx.port = ln.Addr().(*net.TCPAddr).Port

	bundle := presetBundle(tb, dir, map[string]string{"fuzz.rego": fmt.Sprintf(fuzzPreset, fuzzHost, fx.port)})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := policies.New(ctx, policies.Options{Source: policies.Source{Path: bundle}, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	if fx.oracle, err = policies.New(ctx, policies.Options{Source: policies.Source{Path: bundle}, Logger: quiet, CacheSize: -1}); err != nil {
		tb.Fatal(err)
	}
	if fx.roots, err = certs.LoadOrCreate(filepath.Join(dir, "ca"), 16); err != nil {
		tb.Fatal(err)
	}
	guard, err := egress.New(egress.Options{
		AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolve:     []string{fuzzHost + ":" + strconv.Itoa(fx.port) + ":127.0.0.1"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	// Short timeouts: whatever a fuzzed client leaves half-said ends in
	// a second, well inside the fuzzer's limit for one input.
	limits := Limits{ReadHeaderTimeout: time.Second, IdleTimeout: time.Second, HandshakeTimeout: time.Second, TunnelIdleTimeout: time.Second}
	fx.p, err = New(Config{Decider: engine, CA: fx.roots, Guard: guard, UpstreamRoots: upCA.Pool, Logger: quiet, Limits: limits})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(fx.p.transport.CloseIdleConnections)
	// Attributed once, as the first request on a connection would be.
	fx.cc = &clientConn{sb: &sandboxState{Sandbox: Sandbox{ID: "fuzz", Kind: "fuzz", Preset: "fuzz"}},
		proc: &identity.Process{PID: 1, Exe: "/usr/bin/curl", UID: 998}, svc: Service{ID: "fuzz", Kind: "fuzz", Preset: "fuzz"}}
	fx.cc.once.Do(func() {})
	return fx
}

// inspectedTunnel opens a tunnel to fuzzHost, inspected by the real loop
// (Proxy.inspect) over loopback TLS, for the fixture's client: the client's
// TCP end (its deadline d away), its TLS end, and a channel closed when the
// loop has ended.
func (fx *fuzzFixture) inspectedTunnel(t *testing.T, d time.Duration) (net.Conn, *tls.Conn, <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	dc := fx.p.decide(ctx, fx.cc, policies.Request{Phase: policies.PhaseConnect, Host: fuzzHost, Port: fx.port})
	if !dc.d.Allow || !dc.d.Inspect {
		t.Fatalf("CONNECT %s:%d: %+v; the fuzz policy must inspect it", fuzzHost, fx.port, dc.d)
	}
	fx.p.resolve(ctx, dc)
	client, server := testutil.TCPPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer server.Close()
		if fx.p.established(server, dc) {
			fx.p.inspect(fx.cc, server, &tracked{conn: server}, dc)
		}
	}()
	client.SetDeadline(time.Now().Add(d))
	if _, err := io.ReadFull(client, make([]byte, len(established))); err != nil {
		t.Fatalf("CONNECT answer: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(fx.roots.CertPEM)
	tc := tls.Client(client, &tls.Config{ServerName: fuzzHost, RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return client, tc, done
}

// denialOn reads the answer on c, which must be a JSON denial.
func denialOn(t *testing.T, c io.Reader) (*http.Response, Denial) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	var d Denial
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("answer %d: body is no JSON denial: %v", resp.StatusCode, err)
	}
	return resp, d
}

// eval is the oracle: the decision `airlock policy eval` gives for req,
// sent by the fixture's client, read from JSON as the command reads it. A
// document it cannot read is a denial.
func (fx *fuzzFixture) eval(req policies.Request) policies.Decision {
	in := policies.Input{
		Sandbox: policies.Sandbox{ID: "fuzz", Kind: "fuzz", Preset: "fuzz"},
		Process: policies.Process{PID: 1, Exe: "/usr/bin/curl"},
		Request: req,
	}
	doc, err := json.Marshal(in)
	if err != nil {
		return policies.Decision{Reason: policies.ReasonPolicyError, Error: err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	var replay policies.Input
	if err := dec.Decode(&replay); err != nil {
		return policies.Decision{Reason: policies.ReasonPolicyError, Error: err.Error()}
	}
	return fx.oracle.Decide(context.Background(), &replay)
}

// upstream answers every request after checking it: it must name the
// tunnel's host and be allowed by the oracle for exactly the method, path,
// query and upgrade it arrived with, and for every reading a server may
// make of its path, none of which has a dot-segment.
func (fx *fuzzFixture) upstream(w http.ResponseWriter, r *http.Request) {
	if fx.hangUp.Load() {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		return
	}
	if why := fx.check(r); why != "" {
		fx.mu.Lock()
		fx.violations = append(fx.violations, fmt.Sprintf("%s %q Host %q: %s", r.Method, r.RequestURI, r.Host, why))
		fx.mu.Unlock()
	}
	io.Copy(io.Discard, r.Body)
	if answer := fx.answer.Load(); answer != nil {
		(*answer)(w, r)
		return
	}
	if fx.released != nil {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		fx.released <- struct{}{}
		return
	}
	io.WriteString(w, "ok")
}

func (fx *fuzzFixture) check(r *http.Request) string {
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host, port = h, p
	}
	if c, err := policies.CanonicalHost(host); err != nil || c != fuzzHost || (port != "" && port != strconv.Itoa(fx.port)) {
		return "reached the upstream of another host"
	}
	req := policies.Request{Phase: policies.PhaseRequest, Host: host, Port: fx.port,
		Method: r.Method, Path: r.URL.EscapedPath()}
	if r.URL.Opaque != "" {
		req.Path = r.URL.Opaque
	}
	q, err := policies.CanonicalQuery(r.URL.RawQuery)
	if err != nil {
		return "query the policy cannot read: " + err.Error()
	}
	req.Query = q
	if u := r.Header.Values("Upgrade"); len(u) > 0 {
		req.Upgrade = u[0]
		if len(u) > 1 {
			return "several Upgrade headers"
		}
	}
	if d := fx.eval(req); !d.Allow {
		return fmt.Sprintf("policy eval denies it: %s (rule %q) %s", d.Reason, d.Rule, d.Error)
	}
	for _, reading := range testutil.ServerReadings(req.Path) {
		if seg := testutil.DotSegment(reading); seg != "" {
			return fmt.Sprintf("a server reading %q has the dot-segment %q", reading, seg)
		}
		again := req
		again.Path = (&url.URL{Path: reading}).EscapedPath()
		if d := fx.eval(again); !d.Allow {
			return fmt.Sprintf("a server may read the path as %q, which policy eval denies: %s (rule %q)", reading, d.Reason, d.Rule)
		}
	}
	return ""
}

// takeViolations returns what the upstream found since the last call.
func (fx *fuzzFixture) takeViolations() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	v := fx.violations
	fx.violations = nil
	return v
}

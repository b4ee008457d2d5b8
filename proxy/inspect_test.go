package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/certs"
)

// A request net/http cannot parse is described without what it quotes:
// the request line carries query values, a header line credentials.
func TestUnquotedKeepsSecretsOut(t *testing.T) {
	for _, raw := range []string{
		"GET /a%zz?token=SECRET HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /?token=SECRET HTTP/1.x\r\nHost: x\r\n\r\n",
		"GET /?token=SECRET\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nAuthorization SECRET\r\n\r\n",
	} {
		_, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err == nil {
			t.Fatalf("%q parsed", raw)
		}
		if msg := unquoted(err); msg == "" || strings.Contains(msg, "SECRET") {
			t.Errorf("unquoted(%v) = %q", err, msg)
		}
	}
}

// A client's Connection: close ends its connection with the proxy, not
// the proxy's pooled upstream connection: the next client's request goes
// over the same one, without a new upstream handshake.
func TestClientCloseKeepsUpstream(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	tlsTo := func(c net.Conn) net.Conn {
		return tls.Client(c, &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
	}
	inspected := "GET /ok/x HTTP/1.1\r\nHost: api.tp.test\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name    string
		open    func() net.Conn
		request string
	}{
		{"inspected, CONNECT", func() net.Conn { return tlsTo(connectTo(t, d, "api.tp.test")) }, inspected},
		{"inspected, transparent", func() net.Conn { return tlsTo(d.dial(t, fmt.Sprintf("%s:%d", tpAPI, fx.port))) }, inspected},
		{"plain, absolute-form", func() net.Conn { return d.dial(t, fx.explicit) },
			fmt.Sprintf("GET http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%[1]d\r\nConnection: close\r\n\r\n", fx.port)},
		{"plain, transparent", func() net.Conn { return d.dial(t, fmt.Sprintf("%s:%d", tpWeb, fx.port)) },
			fmt.Sprintf("GET /ok/x HTTP/1.1\r\nHost: web.tp.test:%d\r\nConnection: close\r\n\r\n", fx.port)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var upstream []string
			for range 2 {
				c := tc.open()
				br := bufio.NewReader(c)
				resp := get(t, c, br, tc.request)
				// The client asked to close: the proxy closes.
				if _, err := br.ReadByte(); !resp.Close || err != io.EOF {
					t.Fatalf("after an answer to Connection: close: close=%v, read %v; want the connection closed", resp.Close, err)
				}
				c.Close()
				upstream = append(upstream, resp.Header.Get(tpUpstreamConn))
			}
			if upstream[0] == "" || upstream[0] != upstream[1] {
				t.Fatalf("upstream connections %q; want the second request on the first's", upstream)
			}
		})
	}
}

// An allowed request reaches its upstream as the policy decided it: the
// canonical host (its port only when not the scheme's), and the method in
// capitals, whatever spelling the client used that reads as them. A
// fullwidth "ａｐｉ.tp.test" passed as itself would reach the upstream as
// its own punycode, another name, with whatever secret the rule injects.
func TestForwardedAsDecided(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	tlsTo := func(c net.Conn) net.Conn {
		return tls.Client(c, &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
	}
	inspected := fmt.Sprintf("get /ok/x HTTP/1.1\r\nHost: \uff41\uff50\uff49.tp.test.:%d\r\n\r\n", fx.port)
	for _, tc := range []struct {
		name, request, want string
		open                func() net.Conn
	}{
		{"inspected, CONNECT", inspected, fmt.Sprintf("GET api.tp.test:%d", fx.port),
			func() net.Conn { return tlsTo(connectTo(t, d, "api.tp.test")) }},
		{"inspected, transparent", inspected, fmt.Sprintf("GET api.tp.test:%d", fx.port),
			func() net.Conn { return tlsTo(d.dial(t, fmt.Sprintf("%s:%d", tpAPI, fx.port))) }},
		{"plain, absolute-form", fmt.Sprintf("get http://\uff57\uff45\uff42.TP.test:%d/ok/x HTTP/1.1\r\nHost: WEB.tp.test:%[1]d\r\n\r\n", fx.port),
			fmt.Sprintf("GET web.tp.test:%d", fx.port), func() net.Conn { return d.dial(t, fx.explicit) }},
		{"plain, transparent", fmt.Sprintf("get /ok/x HTTP/1.1\r\nHost: \uff57\uff45\uff42.tp.test:%d\r\n\r\n", fx.port),
			fmt.Sprintf("GET web.tp.test:%d", fx.port), func() net.Conn { return d.dial(t, fmt.Sprintf("%s:%d", tpWeb, fx.port)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.open()
			defer c.Close()
			resp := get(t, c, bufio.NewReader(c), tc.request)
			if got := resp.Header.Get(tpUpstreamAsked); got != tc.want {
				t.Errorf("the upstream was asked %q; want %q", got, tc.want)
			}
		})
	}
}

// A request that names another method for itself (an override header, a
// _method in its query) is decided as that method too: the upstream's
// framework may act on it as one. The api rule allows GET only.
func TestMethodOverridesAreDecided(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	for _, tc := range []struct {
		name, head     string
		allowed        bool
		reason, method string
	}{
		{"no override", "GET /ok/x HTTP/1.1\r\n", true, "", ""},
		{"override to the same method", "GET /ok/x HTTP/1.1\r\nX-HTTP-Method-Override: get\r\n", true, "", ""},
		{"X-HTTP-Method-Override", "GET /ok/x HTTP/1.1\r\nX-HTTP-Method-Override: DELETE\r\n", false, "method_not_allowed", "DELETE"},
		{"X-HTTP-Method", "GET /ok/x HTTP/1.1\r\nX-Http-Method: PUT\r\n", false, "method_not_allowed", "PUT"},
		{"X-Method-Override", "GET /ok/x HTTP/1.1\r\nx-method-override: PATCH\r\n", false, "method_not_allowed", "PATCH"},
		{"a second header", "GET /ok/x HTTP/1.1\r\nX-HTTP-Method-Override: GET\r\nX-HTTP-Method-Override: DELETE\r\n", false, "method_not_allowed", "DELETE"},
		{"_method in the query", "GET /ok/x?_method=DELETE HTTP/1.1\r\n", false, "method_not_allowed", "DELETE"},
		{"_method[] in the query", "GET /ok/x?_METHOD%5B%5D=DELETE HTTP/1.1\r\n", false, "method_not_allowed", "DELETE"},
		{".method in the query (PHP's _method)", "GET /ok/x?.method=DELETE HTTP/1.1\r\n", false, "method_not_allowed", "DELETE"},
		{"a fullwidth ．method in the query", "GET /ok/x?%EF%BC%8Emethod=DELETE HTTP/1.1\r\n", false, "method_not_allowed", "DELETE"},
		{"_method[0] in the query", "GET /ok/x?_method%5B0%5D=DELETE HTTP/1.1\r\n", false, "method_not_allowed", "DELETE"},
		{"not a token", "GET /ok/x HTTP/1.1\r\nX-HTTP-Method-Override: DEL ETE\r\n", false, "invalid_request", "GET"},
		// CGI's naming (Rack, PHP) reads "_" as "-": the same header there.
		{"X_HTTP_Method_Override", "GET /ok/x HTTP/1.1\r\nX_HTTP_Method_Override: DELETE\r\n", false, "method_not_allowed", "DELETE"},
		{"X-HTTP_Method-Override", "GET /ok/x HTTP/1.1\r\nX-HTTP_Method-Override: DELETE\r\n", false, "method_not_allowed", "DELETE"},
		{"x_http_method", "GET /ok/x HTTP/1.1\r\nx_http_method: PUT\r\n", false, "method_not_allowed", "PUT"},
		{"X_Method_Override", "GET /ok/x HTTP/1.1\r\nX_Method_Override: PATCH\r\n", false, "method_not_allowed", "PATCH"},
		// Decided again as sent, not as the first decision canonicalised
		// it: decoded twice, %3B would be a parameter segment's ";", and
		// %25 an escape of nothing.
		{"an escaped semicolon", "GET /ok/a%3Bb HTTP/1.1\r\nX-HTTP-Method-Override: GET\r\n", true, "", ""},
		{"an escaped percent sign", "GET /ok/100%25 HTTP/1.1\r\nX-HTTP-Method-Override: GET\r\n", true, "", ""},
		// A query's value is not written down unless it is one of
		// HTTP's methods: denied as the request was sent.
		{"_method not HTTP's", "GET /ok/x?_method=SKLIVE123 HTTP/1.1\r\n", false, "method_not_allowed", "GET"},
		{"_method no token", "GET /ok/x?_method=QUERYVALUE%2Fsk-live-123 HTTP/1.1\r\n", false, "invalid_request", "GET"},
		// The path, not the method, named again: refused.
		{"X-Original-URL", "GET /ok/x HTTP/1.1\r\nX-Original-URL: /admin/delete\r\n", false, "invalid_request", "GET"},
		{"X_Rewrite_URL", "GET /ok/x HTTP/1.1\r\nX_Rewrite_URL: /admin/delete\r\n", false, "invalid_request", "GET"},
		// lighttpd makes every byte that is no letter or digit a "_".
		{"X.HTTP.Method.Override", "GET /ok/x HTTP/1.1\r\nX.HTTP.Method.Override: DELETE\r\n", false, "method_not_allowed", "DELETE"},
		{"X~Method~Override", "GET /ok/x HTTP/1.1\r\nX~Method~Override: PATCH\r\n", false, "method_not_allowed", "PATCH"},
		{"X.Original.URL", "GET /ok/x HTTP/1.1\r\nX.Original.URL: /admin/delete\r\n", false, "invalid_request", "GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, den, denied := fx.onAPI(t, d, tc.head, tc.allowed)
			if !denied {
				return
			}
			if resp.StatusCode != http.StatusForbidden || den.Reason != tc.reason || den.Method != tc.method {
				t.Fatalf("answer %d %+v; want 403 %s, the request denied as %s", resp.StatusCode, den, tc.reason, tc.method)
			}
		})
	}
	for _, secret := range []string{"SKLIVE123", "sk-live-123"} {
		if raw := fx.audit.String(); strings.Contains(raw, secret) {
			t.Errorf("a query's value %q is on the audit log:\n%s", secret, raw)
		}
	}
}

// A method override denied for its query (the api-post rule allows a POST
// with confirm=yes only) is decided, answered and audited as the method
// it names, the detail saying which parameter failed: a query_not_allowed
// detail is no error of the decision's, which would have it answered as
// the request was sent.
func TestMethodOverrideDeniedForItsQuery(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	for _, tc := range []struct {
		name, head string
		allowed    bool
	}{
		{"X-HTTP-Method-Override", "GET /ok/header HTTP/1.1\r\nX-HTTP-Method-Override: POST\r\n", false},
		{"_method in the query", "GET /ok/query?_method=POST HTTP/1.1\r\n", false},
		{"the query the rule wants", "GET /ok/x?confirm=yes HTTP/1.1\r\nX-HTTP-Method-Override: POST\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, den, denied := fx.onAPI(t, d, tc.head, tc.allowed)
			if !denied {
				return
			}
			const why = `query parameter "confirm" is missing`
			if resp.StatusCode != http.StatusForbidden || den.Reason != string(policies.ReasonQueryNotAllowed) || den.Method != "POST" || den.Rule != "api-post" || !strings.Contains(den.Hint, why) {
				t.Fatalf("answer %d %+v; want 403 query_not_allowed by rule api-post, the request denied as POST, the hint saying %s", resp.StatusCode, den, why)
			}
			fx.line(t, AuditMessage, "api.tp.test", policies.ReasonQueryNotAllowed, func(l map[string]any) bool {
				detail, _ := l["detail"].(string)
				return l["path"] == den.Path && l["method"] == "POST" && strings.Contains(detail, why)
			})
		})
	}
}

// A request refused for naming another host than its tunnel says what it
// asked for: its path is on the denial and the audit line.
func TestHostMismatchNamesThePath(t *testing.T) {
	fx := newTPFixture(t)
	c := tls.Client(connectTo(t, fx.dialer(t), "api.tp.test"), &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
	defer c.Close()
	go io.WriteString(c, "GET /ok/asked HTTP/1.1\r\nHost: tls.tp.test\r\n\r\n")
	resp, den := denialOn(t, c)
	if resp.StatusCode != http.StatusMisdirectedRequest || den.Reason != string(policies.ReasonHostMismatch) || den.Path != "/ok/asked" {
		t.Fatalf("answer %d %+v; want 421 host_mismatch naming /ok/asked", resp.StatusCode, den)
	}
}

func TestHostHeader(t *testing.T) {
	for _, tc := range []struct {
		host   string
		port   int
		scheme string
		want   string
	}{
		{"api.test", 443, "https", "api.test"},
		{"api.test", 80, "http", "api.test"},
		{"api.test", 80, "https", "api.test:80"},
		{"api.test", 8443, "https", "api.test:8443"},
		{"::1", 443, "https", "[::1]"},
		{"::1", 8080, "http", "[::1]:8080"},
	} {
		if got := hostHeader(tc.host, tc.port, tc.scheme); got != tc.want {
			t.Errorf("hostHeader(%q, %d, %q) = %q; want %q", tc.host, tc.port, tc.scheme, got, tc.want)
		}
	}
}

// The client's leg of an inspected connection agrees on X25519 with a
// client that offers it beside a post-quantum exchange (Go's and
// OpenSSL's defaults), and still serves one that offers only the latter.
func TestClientLegKeyExchange(t *testing.T) {
	ca, err := certs.LoadOrCreate(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{cfg: Config{CA: ca, Limits: DefaultLimits}}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	for _, tc := range []struct {
		name   string
		offers []tls.CurveID // nil: Go's defaults
		want   tls.CurveID
	}{
		{"Go's defaults", nil, tls.X25519},
		{"P-256 only", []tls.CurveID{tls.CurveP256}, tls.CurveP256},
		{"post-quantum only", []tls.CurveID{tls.X25519MLKEM768}, tls.X25519MLKEM768},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			done := make(chan error, 1)
			go func() {
				tc, err := p.serverTLS(server, "api.test")
				if err == nil {
					tc.Close()
				}
				done <- err
			}()
			c := tls.Client(client, &tls.Config{ServerName: "api.test", RootCAs: roots, CurvePreferences: tc.offers})
			if err := c.Handshake(); err != nil {
				t.Fatalf("handshake: %v (server: %v)", err, <-done)
			}
			if got := c.ConnectionState().CurveID; got != tc.want {
				t.Fatalf("key exchange %v; want %v", got, tc.want)
			}
			client.Close()
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
		})
	}
}

// writeCounter records each write that reaches it (a syscall, and over
// TLS a record, each), and hands it on to seen.
type writeCounter struct{ seen chan string }

func (w writeCounter) Write(p []byte) (int, error) {
	w.seen <- string(p)
	return len(p), nil
}

// A response whose body's length is known goes out in one write, header
// and body; a stream's header and each part go out as they come, before
// the upstream is waited on for the next.
func TestWriteResponseWrites(t *testing.T) {
	response := func(body io.Reader, length int64) *http.Response {
		return &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{},
			Body: io.NopCloser(body), ContentLength: length}
	}
	t.Run("known length", func(t *testing.T) {
		w := writeCounter{seen: make(chan string, 8)}
		if err := writeResponse(bufio.NewWriterSize(w, 16<<10), response(strings.NewReader("hello"), 5)); err != nil {
			t.Fatal(err)
		}
		close(w.seen)
		var writes []string
		for s := range w.seen {
			writes = append(writes, s)
		}
		if len(writes) != 1 || !strings.HasSuffix(writes[0], "\r\n\r\nhello") {
			t.Fatalf("writes %q; want the header and the body in one", writes)
		}
	})
	t.Run("stream", func(t *testing.T) {
		w := writeCounter{seen: make(chan string, 8)}
		up, upstream := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- writeResponse(bufio.NewWriterSize(w, 16<<10), response(up, -1)) }()
		got := ""
		for _, part := range []string{"", "data: one\n\n", "data: two\n\n"} {
			if part == "" { // the header, before the stream's first part
				part = "\r\n\r\n"
			} else {
				upstream.Write([]byte(part)) // returns once the proxy has read it
			}
			for !strings.Contains(got, part) {
				select {
				case s := <-w.seen: // the part is written before the next read
					got += s
				case <-time.After(10 * time.Second):
					t.Fatalf("wrote %q; %q not written while the upstream is waited on", got, part)
				}
			}
		}
		upstream.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if client, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// watchClient sees a client leave, whether before its watch begins or
// after, and keeps what a staying client sends for the next request; an
// answer before the watch begins ends it unstarted.
func TestWatchClient(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		leave bool
	}{
		{"client leaves", 0, true},
		{"client leaves before the watch", 20 * time.Millisecond, true},
		{"client sends its next request", 0, false},
		{"answered before the watch", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			br := bufio.NewReader(server)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			stop := watchClient(server, br, cancel, tc.after)
			if tc.leave {
				client.Close()
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the client's leaving was not seen")
				}
				stop()
				if cause := context.Cause(ctx); cause != errClientGone {
					t.Fatalf("cancelled for %v; want %v", cause, errClientGone)
				}
				return
			}
			io.WriteString(client, "GET /next HTTP/1.1\r\n")
			stop()
			if ctx.Err() != nil {
				t.Fatalf("cancelled (%v) with the client still there", context.Cause(ctx))
			}
			if line, err := br.ReadString('\n'); line != "GET /next HTTP/1.1\r\n" {
				t.Fatalf("next request %q, %v; want what the client sent", line, err)
			}
		})
	}
}

// A request inside a tunnel names its host as the tunnel's, in its
// canonical spelling or another; the canonical one, which clients nearly
// always send, is matched without canonicalising it again.
func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		hostport string
		want     bool
	}{
		{"api.test:443", true},
		{"api.test", true},
		{"API.Test.:443", true},
		{"api.test:444", false},
		{"api.test:0443", false},
		{"other.test:443", false},
		{"api.test.evil:443", false},
	} {
		if got := sameHost(tc.hostport, "api.test", 443); got != tc.want {
			t.Errorf("sameHost(%q, api.test, 443) = %v, want %v", tc.hostport, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { sameHost("api.test:443", "api.test", 443) }); n != 0 {
		t.Errorf("sameHost of the canonical spelling: %v allocations, want 0 (no canonicalisation)", n)
	}
}

// A client that keeps its TLS sessions resumes on its next inspected
// connection, to the same host, whichever way it came: and each request on
// it is decided as on a full handshake.
func TestInspectedConnectionsResume(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	for _, tc := range []struct {
		name string
		open func() net.Conn
	}{
		{"CONNECT", func() net.Conn { return connectTo(t, d, "api.tp.test") }},
		{"transparent", func() net.Conn { return d.dial(t, fmt.Sprintf("%s:%d", tpAPI, fx.port)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"},
				ClientSessionCache: tls.NewLRUClientSessionCache(4)}
			var resumed []bool
			for _, path := range []string{"/ok/x", "/no"} {
				c := tls.Client(tc.open(), cfg)
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: api.tp.test\r\nConnection: close\r\n\r\n", path)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				if path == "/ok/x" {
					wantBody(t, resp, http.StatusOK, tpUpstreamBody)
				} else {
					wantDenial(t, resp, http.StatusForbidden, policies.ReasonPathNotAllowed, "api.tp.test")
				}
				resumed = append(resumed, c.ConnectionState().DidResume)
				c.Close()
			}
			if !slices.Equal(resumed, []bool{false, true}) {
				t.Fatalf("resumed %v; want the second connection resumed", resumed)
			}
		})
	}
}

// An inspected request whose upstream fails while its client is still
// sending the body is answered then (502, and the connection closes): the
// proxy reads no more of the body than refuse's bounded drain, not the rest
// of an upload that may not end.
func TestUpstreamFailureDoesNotReadTheBodyToItsEnd(t *testing.T) {
	fx := newFuzzFixture(t)
	fx.hangUp.Store(true)
	client, tc, done := fx.inspectedTunnel(t, 10*time.Second)
	defer func() { client.Close(); <-done }()
	go func() {
		fmt.Fprintf(tc, "POST /upload/x?mode=safe HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n\r\n", fuzzHost, fx.port, int64(1)<<40)
		chunk := make([]byte, 64<<10)
		for {
			if _, err := tc.Write(chunk); err != nil {
				return
			}
		}
	}()
	resp, d := denialOn(t, tc)
	if resp.StatusCode != http.StatusBadGateway || d.Reason != string(policies.ReasonUpstreamError) || !resp.Close {
		t.Fatalf("answer %d %+v close=%v; want 502 %s, and the connection closed", resp.StatusCode, d, resp.Close, policies.ReasonUpstreamError)
	}
}

// A request body its client stops sending ends after --idle-timeout (a
// second here) with a 400 that says so, and the connection closes. With
// its upstream gone too it is answered all the same, though the transport
// reports nothing, not even that failure, while it waits on that read: with
// the stall's 400, or the upstream's 502 when the failure came first (a
// write of the body to the closed connection).
func TestStalledBodyEnds(t *testing.T) {
	for _, hangUp := range []bool{false, true} {
		t.Run(fmt.Sprintf("upstream hangs up %v", hangUp), func(t *testing.T) {
			fx := newFuzzFixture(t)
			fx.hangUp.Store(hangUp)
			client, tc, done := fx.inspectedTunnel(t, 10*time.Second)
			defer func() { client.Close(); <-done }()
			fmt.Fprintf(tc, "POST /upload/x?mode=safe HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 100\r\n\r\n0123456789", fuzzHost, fx.port)
			resp, d := denialOn(t, tc)
			stalled := resp.StatusCode == http.StatusBadRequest && d.Reason == string(policies.ReasonInvalidRequest) &&
				strings.Contains(d.Hint, "the request body stopped arriving: nothing came for 1s (--idle-timeout)")
			upstream := hangUp && resp.StatusCode == http.StatusBadGateway && d.Reason == string(policies.ReasonUpstreamError)
			if !stalled && !upstream || !resp.Close {
				t.Fatalf("answer %d %+v close=%v; want 400 %s saying the body stopped, and the connection closed", resp.StatusCode, d, resp.Close, policies.ReasonInvalidRequest)
			}
		})
	}
}

// A request in an inspected tunnel that the proxy cannot read is answered
// as an HTTP server answers it, the reason invalid_request: a header over
// the limit with 431, one that does not parse with 400.
func TestUnreadableInnerRequests(t *testing.T) {
	fx := newFuzzFixture(t)
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"header too large", "GET /repos/a HTTP/1.1\r\nHost: " + fuzzHost + "\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"unknown transfer coding", "POST /upload/x?mode=safe HTTP/1.1\r\nHost: " + fuzzHost + "\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusBadRequest},
		// Its body would be the next request of an upstream that takes
		// a CONNECT to have none.
		{"CONNECT", "CONNECT /repos/a HTTP/1.1\r\nHost: " + fuzzHost + "\r\nContent-Length: 25\r\n\r\nDELETE /repos/a HTTP/1.1\r\n", http.StatusForbidden},
		{"CONNECT, authority-form", "connect " + fuzzHost + ":443 HTTP/1.1\r\nHost: " + fuzzHost + "\r\n\r\n", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, tlsc, done := fx.inspectedTunnel(t, 10*time.Second)
			defer func() { client.Close(); <-done }()
			go io.WriteString(tlsc, tc.request)
			resp, d := denialOn(t, tlsc)
			if resp.StatusCode != tc.status || d.Reason != string(policies.ReasonInvalidRequest) || !resp.Close {
				t.Fatalf("answer %d %+v close=%v; want %d %s, and the connection closed", resp.StatusCode, d, resp.Close, tc.status, policies.ReasonInvalidRequest)
			}
		})
	}
}

// A POST answered by a stream (as MCP's are) whose client goes while the
// stream is quiet releases its upstream: the client is watched once the
// body has all been read, as a bodiless request's is from the start.
func TestClientGoneAfterItsBody(t *testing.T) {
	fx := newFuzzFixture(t)
	fx.released = make(chan struct{}, 1)
	client, tc, done := fx.inspectedTunnel(t, 10*time.Second)
	defer func() { <-done }()
	fmt.Fprintf(tc, "POST /upload/x?mode=safe HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 5\r\n\r\nhello", fuzzHost, fx.port)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream answer: %v %v", resp, err)
	}
	client.Close()
	select {
	case <-fx.released:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream's stream was still held 20s after its client went")
	}
}

// onAPI sends head (a request line and headers; Host is added) to
// api.tp.test in an inspected tunnel: allowed, its answer is read as a
// 200 (get) and denied is false; else the answer and its denial.
func (fx *tpFixture) onAPI(t *testing.T, d *dialer, head string, allowed bool) (resp *http.Response, den Denial, denied bool) {
	t.Helper()
	c := tls.Client(connectTo(t, d, "api.tp.test"), &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
	t.Cleanup(func() { c.Close() })
	request := head + "Host: api.tp.test\r\n\r\n"
	if allowed {
		get(t, c, bufio.NewReader(c), request)
		return nil, Denial{}, false
	}
	go io.WriteString(c, request)
	resp, den = denialOn(t, c)
	return resp, den, true
}

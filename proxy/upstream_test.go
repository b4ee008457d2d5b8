package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// rawOrigin is an HTTP/1.1 origin on loopback whose every connection is
// served by serve, request by request, so that a test can answer as no
// well-behaved server would. closed receives each connection's end.
type rawOrigin struct {
	addr   string
	conns  atomic.Int32
	closed chan struct{}
}

func newRawOrigin(t *testing.T, serve func(n int, c net.Conn, req *http.Request) (keep bool)) *rawOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{addr: ln.Addr().String(), closed: make(chan struct{}, 16)}
	t.Cleanup(func() { ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) {
		o.conns.Add(1)
		defer func() { c.Close(); o.closed <- struct{}{} }()
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil || !serve(n, c, req) {
				return
			}
		}
	})
	return o
}

func newTestUpstreamTransport() *upstreamTransport {
	return newUpstreamTransport(&http.Transport{
		DialContext:           (&net.Dialer{}).DialContext,
		ResponseHeaderTimeout: time.Minute,
		IdleConnTimeout:       time.Minute,
		MaxIdleConnsPerHost:   4,
	})
}

// send GETs / from o through tr and reads the whole answer.
func send(ctx context.Context, tr *upstreamTransport, o *rawOrigin) (string, error) {
	req, err := http.NewRequestWithContext(owned(ctx), http.MethodGet, "http://"+o.addr+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b), err
}

// ok answers "ok", with extra headers; a header "X: y" sends bytes after
// the answer, in the same write.
func ok(c net.Conn, extra string) {
	after := ""
	if extra == "X: y\r\n" {
		after = "junk"
	}
	io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"+extra+"\r\nok"+after)
}

// The transport keeps a connection for the next request, and sends a
// request again on a new one only when a kept connection turns out to be
// gone before a byte of answer: what a client relies on is one answer per
// request, and no request repeated once an upstream has begun answering.
func TestUpstreamTransportKeepsAndReplays(t *testing.T) {
	for _, tc := range []struct {
		name      string
		serve     func(n int, c net.Conn, req *http.Request) bool
		wantConns int32
		wantErr   bool
	}{
		{"kept", func(n int, c net.Conn, _ *http.Request) bool { ok(c, ""); return true }, 1, false},
		{"upstream says close", func(n int, c net.Conn, _ *http.Request) bool { ok(c, "Connection: close\r\n"); return false }, 2, false},
		// Closed after its answer without saying so: the second request
		// meets the close and goes again on a new connection.
		{"closed while kept", func(n int, c net.Conn, _ *http.Request) bool { ok(c, ""); return false }, 2, false},
		// More than the answer: the connection's next bytes are no answer
		// to anything the proxy sends, so it is not kept.
		{"more than the answer", func(n int, c net.Conn, _ *http.Request) bool { ok(c, "X: y\r\n"); return true }, 2, false},
		// Informational answers precede the final one.
		{"early hints", func(n int, c net.Conn, _ *http.Request) bool {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n")
			ok(c, "")
			return true
		}, 1, false},
		// The second request's answer had begun: it is not sent again.
		{"cut mid-answer", func(n int, c net.Conn, _ *http.Request) bool {
			if n == 1 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Len")
				return false
			}
			ok(c, "")
			return true
		}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newRawOrigin(t, tc.serve)
			tr := newTestUpstreamTransport()
			defer tr.CloseIdleConnections()
			var errs []error
			for range 2 {
				got, err := send(context.Background(), tr, o)
				if err == nil && got != "200 ok" {
					t.Fatalf("answer %q; want 200 ok", got)
				}
				errs = append(errs, err)
			}
			if errs[0] != nil || (errs[1] != nil) != tc.wantErr {
				t.Fatalf("errors %v; want an error for the second only: %v", errs, tc.wantErr)
			}
			if n := o.conns.Load(); n != tc.wantConns {
				t.Fatalf("%d upstream connections; want %d", n, tc.wantConns)
			}
		})
	}
}

// A request the transport cannot send again (a POST) goes through the
// fallback transport, and still reaches the origin once.
func TestUpstreamTransportFallsBack(t *testing.T) {
	var posts atomic.Int32
	o := newRawOrigin(t, func(n int, c net.Conn, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		if req.Method == http.MethodPost {
			posts.Add(1)
		}
		ok(c, "")
		return true
	})
	tr := newTestUpstreamTransport()
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(owned(context.Background()), http.MethodPost, "http://"+o.addr+"/", nil)
	if !replayable(mustGet(t, o)) || replayable(req) {
		t.Fatal("replayable: want GET without a body only")
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if posts.Load() != 1 {
		t.Fatalf("%d POSTs reached the origin; want 1", posts.Load())
	}
}

func mustGet(t *testing.T, o *rawOrigin) *http.Request {
	req, err := http.NewRequestWithContext(owned(context.Background()), http.MethodGet, "http://"+o.addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// testOwner owns the requests of the tests that are not about owners.
var testOwner = poolOwner{sandbox: policies.Sandbox{ID: "test", Preset: "strict"}, exe: "/usr/bin/curl"}

func owned(ctx context.Context) context.Context { return withOwner(ctx, testOwner) }

// A request whose context ends (its client went away) or whose upstream
// does not answer within the header timeout fails with that cause, and its
// connection is closed, not kept.
func TestUpstreamTransportCancels(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	o := newRawOrigin(t, func(n int, c net.Conn, _ *http.Request) bool { <-hold; return false })
	gone := errors.New("client gone")
	for _, tc := range []struct {
		name   string
		ctx    func() context.Context
		header time.Duration
		want   func(error) bool
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(50*time.Millisecond, func() { cancel(gone) })
			return ctx
		}, 10 * time.Second, func(err error) bool { return errors.Is(err, gone) }},
		{"header timeout", context.Background, 50 * time.Millisecond, func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout() && strings.Contains(err.Error(), "timeout awaiting response headers")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestUpstreamTransport()
			tr.base.ResponseHeaderTimeout = tc.header
			_, err := send(tc.ctx(), tr, o)
			if !tc.want(err) {
				t.Fatalf("error %v; want the request's own cause", err)
			}
			if tr.nidle != 0 {
				t.Fatal("the connection was kept")
			}
		})
	}
}

// A kept connection is closed once idle for IdleConnTimeout, and
// CloseIdleConnections closes those kept and those handed back later.
func TestUpstreamTransportCloses(t *testing.T) {
	o := newRawOrigin(t, func(n int, c net.Conn, _ *http.Request) bool { ok(c, ""); return true })
	waitClosed := func() {
		t.Helper()
		select {
		case <-o.closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the kept connection is still open")
		}
	}
	tr := newTestUpstreamTransport()
	tr.base.IdleConnTimeout = 50 * time.Millisecond
	if _, err := send(context.Background(), tr, o); err != nil {
		t.Fatal(err)
	}
	waitClosed()

	tr = newTestUpstreamTransport()
	resp, err := tr.RoundTrip(mustGet(t, o)) // in use while the transport closes
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send(context.Background(), tr, o); err != nil { // on a second connection, kept
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	waitClosed()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitClosed()
}

// A body closed before its end closes its connection at once, without
// reading the rest: an endless answer to a client that stopped reading
// must not hold the request forever.
func TestUpstreamTransportClosesAnUnreadBody(t *testing.T) {
	o := newRawOrigin(t, func(n int, c net.Conn, _ *http.Request) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for {
			if _, err := io.WriteString(c, "4\r\nmore\r\n"); err != nil {
				return false
			}
		}
	})
	tr := newTestUpstreamTransport()
	resp, err := tr.RoundTrip(mustGet(t, o))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 64))
	closed := make(chan struct{})
	go func() { resp.Body.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close is reading the endless body")
	}
	select {
	case <-o.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed")
	}
}

// A kept connection the upstream wrote to while it was idle (a 408 before
// its idle close, a late body) is not reused: those bytes would be read as
// the next request's answer, maybe another sandbox's.
func TestUpstreamTransportDropsAConnectionThatSpoke(t *testing.T) {
	kept, spoke := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	o := newRawOrigin(t, func(n int, c net.Conn, _ *http.Request) bool {
		ok(c, "")
		if first.CompareAndSwap(false, true) {
			<-kept // the answer read, the connection handed back
			io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
			close(spoke)
		}
		return true
	})
	tr := newTestUpstreamTransport()
	defer tr.CloseIdleConnections()
	if got, err := send(context.Background(), tr, o); err != nil || got != "200 ok" {
		t.Fatalf("first answer %q, %v; want 200 ok", got, err)
	}
	close(kept)
	<-spoke
	if got, err := send(context.Background(), tr, o); err != nil || got != "200 ok" {
		t.Fatalf("second answer %q, %v; want 200 ok, not the bytes the upstream sent unasked", got, err)
	}
	if n := o.conns.Load(); n != 2 {
		t.Errorf("%d upstream connections; want 2 (the one that spoke dropped)", n)
	}
}

// A request whose answer does not begin within the header timeout is not
// sent again on another kept connection: it reached the upstream, and the
// timeout bounds the wait once, not once per kept connection.
func TestUpstreamTransportDoesNotRetryATimeout(t *testing.T) {
	var requests atomic.Int32
	release, hang := make(chan struct{}), make(chan struct{})
	defer close(hang)
	o := newRawOrigin(t, func(n int, c net.Conn, _ *http.Request) bool {
		if requests.Add(1) <= 2 {
			<-release // the first two overlap: two kept connections
			ok(c, "")
			return true
		}
		<-hang // no answer in time
		return false
	})
	tr := newUpstreamTransport(&http.Transport{
		DialContext:           (&net.Dialer{}).DialContext,
		ResponseHeaderTimeout: 200 * time.Millisecond,
		IdleConnTimeout:       time.Minute,
		MaxIdleConnsPerHost:   4,
	})
	defer tr.CloseIdleConnections()
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := send(context.Background(), tr, o); errs <- err }()
	}
	for requests.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := send(context.Background(), tr, o); err == nil || !strings.Contains(err.Error(), "--upstream-header-timeout") {
		t.Fatalf("a request left unanswered: %v; want the header timeout", err)
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("the upstream received %d requests; want 3 (the unanswered one once)", n)
	}
}

// The same over TLS, where the stray bytes are a second record that came
// in the same segment as the answer's: TLS has taken them off the socket,
// so only a read finds them.
func TestUpstreamTransportDropsATLSConnectionThatSpoke(t *testing.T) {
	ca, err := testca.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := ca.ServerConfig("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	testutil.ServeConns(ln, func(c net.Conn) {
		n := conns.Add(1)
		// Writes held until flush: the answer and the stray bytes are
		// two records in one segment.
		raw := &heldConn{Conn: c}
		tc := tls.Server(raw, srvCfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		raw.hold = true
		br := bufio.NewReader(tc)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if n == 1 {
				io.WriteString(tc, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
			}
			raw.flush()
		}
	})
	tr := newUpstreamTransport(&http.Transport{
		DialContext:           (&net.Dialer{}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: ca.Pool},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		IdleConnTimeout:       time.Minute,
		MaxIdleConnsPerHost:   4,
	})
	defer tr.CloseIdleConnections()
	get := func() string {
		req, _ := http.NewRequestWithContext(owned(context.Background()), http.MethodGet, "https://"+ln.Addr().String()+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	for i := range 2 {
		if got := get(); got != "200 ok" {
			t.Fatalf("answer %d: %q; want 200 ok, not the bytes the upstream sent unasked", i+1, got)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d upstream connections; want 2 (the one that spoke dropped)", n)
	}
}

// heldConn holds its writes, once hold is set, until flush.
type heldConn struct {
	net.Conn
	hold bool
	buf  bytes.Buffer
}

func (c *heldConn) Write(b []byte) (int, error) {
	if !c.hold {
		return c.Conn.Write(b)
	}
	return c.buf.Write(b)
}

func (c *heldConn) flush() {
	c.Conn.Write(c.buf.Bytes())
	c.buf.Reset()
}

// An upstream whose answer's header does not end is cut at
// maxResponseHeaderBytes, on the kept connections and on the fallback
// alike: an upstream must not grow the proxy's memory at will. A header
// just under the bound passes.
func TestUpstreamTransportBoundsTheResponseHeader(t *testing.T) {
	o := newRawOrigin(t, func(n int, c net.Conn, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		size := 4 * maxResponseHeaderBytes // endless, as far as the proxy may tell
		if req.URL.Path == "/fits" {
			size = maxResponseHeaderBytes - 1024
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: "+strings.Repeat("a", size)+"\r\n\r\nok")
		return true
	})
	tr := newTestUpstreamTransport()
	defer tr.CloseIdleConnections()
	for _, method := range []string{http.MethodGet, http.MethodPost} { // kept, fallback
		for _, path := range []string{"/fits", "/endless"} {
			req, _ := http.NewRequestWithContext(owned(context.Background()), method, "http://"+o.addr+path, nil)
			resp, err := tr.RoundTrip(req)
			if path == "/fits" {
				if err != nil {
					t.Fatalf("%s %s: %v; want the answer", method, path, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				continue
			}
			if err == nil {
				resp.Body.Close()
				t.Fatalf("%s %s: answered %d; want the header refused", method, path, resp.StatusCode)
			}
			if method == http.MethodGet && !strings.Contains(err.Error(), fmt.Sprintf("larger than %d bytes", maxResponseHeaderBytes)) {
				t.Errorf("%s %s: %v; want the bound named", method, path, err)
			}
		}
	}
}

// No upstream connection carries two owners' requests. An upstream that
// reads a body as the start of its next request (CL.0) would otherwise
// join another sandbox's request, the credentials the proxy injected into
// it included, to a request the first sandbox began: here A's body begins
// "GET /capture" and leaves its header open, and B's request, sent next,
// must not be read as the rest of it. A request without an owner is
// refused, and a program's own requests still share its connections.
func TestUpstreamTransportKeepsOwnersApart(t *testing.T) {
	type seen struct {
		conn, path, auth string
	}
	var mu sync.Mutex
	var log []seen
	o := newRawOrigin(t, func(n int, c net.Conn, req *http.Request) bool {
		mu.Lock()
		log = append(log, seen{c.RemoteAddr().String(), req.URL.Path, req.Header.Get("Authorization")})
		mu.Unlock()
		ok(c, "") // the body is left unread: the next request begins with it
		return true
	})
	ownerA := poolOwner{sandbox: policies.Sandbox{ID: "a", Preset: "coder"}, exe: "/usr/bin/python3", sha256: "aa"}
	ownerB := poolOwner{sandbox: policies.Sandbox{ID: "b", Preset: "coder"}, exe: "/usr/bin/python3", sha256: "aa"}
	ownerB2 := poolOwner{sandbox: ownerB.sandbox, exe: "/usr/bin/curl", sha256: "bb"} // B's other program
	tr := newTestUpstreamTransport()
	defer tr.CloseIdleConnections()
	do := func(ctx context.Context, method, auth, body string) error {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+o.addr+"/", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body = nil
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := do(context.Background(), http.MethodGet, "", ""); !errors.Is(err, errNoOwner) {
		t.Fatalf("a request without an owner: %v; want errNoOwner", err)
	}
	if o.conns.Load() != 0 {
		t.Fatal("a request without an owner reached the upstream")
	}
	steps := []struct {
		owner        poolOwner
		method, auth string
		body         string
	}{
		{ownerA, http.MethodPost, "", "GET /capture HTTP/1.1\r\nX-Pad: "},
		{ownerB, http.MethodPost, "Bearer b-secret", "b"},
		{ownerB2, http.MethodPost, "Bearer b2-secret", "c"},
		{ownerA, http.MethodGet, "", ""},
		{ownerB, http.MethodGet, "Bearer b-secret", ""},
		{ownerA, http.MethodGet, "", ""},
		{ownerB, http.MethodGet, "Bearer b-secret", ""},
	}
	for i, st := range steps {
		if err := do(withOwner(context.Background(), st.owner), st.method, st.auth, st.body); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range log {
		if r.auth != "" && r.path != "/" {
			t.Errorf("B's credentials reached the upstream in a request to %s (on %s): A's request read on into B's", r.path, r.conn)
		}
	}
	// One connection for each of A's and B's POSTs and B's other
	// program's, and one each for A's and B's GETs, used twice.
	if n := o.conns.Load(); n != 5 {
		t.Errorf("%d upstream connections; want 5: one per owner and transport, each owner's kept for its next request", n)
	}
}

// A fallback transport gives way to a new owner's once maxFallbacks
// owners have one, the least recently used first, and its idle
// connections are closed with it: the descriptors the fallbacks hold stay
// within their share of maxIdleUpstream.
func TestUpstreamTransportBoundsTheFallbacks(t *testing.T) {
	o := newRawOrigin(t, func(n int, c net.Conn, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		ok(c, "")
		return true
	})
	tr := newTestUpstreamTransport()
	defer tr.CloseIdleConnections()
	post := func(i int) {
		t.Helper()
		owner := poolOwner{sandbox: policies.Sandbox{ID: fmt.Sprintf("s%d", i)}}
		req, _ := http.NewRequestWithContext(withOwner(context.Background(), owner), http.MethodPost, "http://"+o.addr+"/", strings.NewReader("x"))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range maxFallbacks {
		post(i)
	}
	post(0) // s0 is used most recently, s1 least
	select {
	case <-o.closed:
		t.Fatal("a connection was closed before any fallback gave way")
	case <-time.After(100 * time.Millisecond):
	}
	post(maxFallbacks)
	select {
	case <-o.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection of the fallback that gave way is still open")
	}
	tr.mu.Lock()
	_, s0 := tr.fallbacks[poolOwner{sandbox: policies.Sandbox{ID: "s0"}}]
	_, s1 := tr.fallbacks[poolOwner{sandbox: policies.Sandbox{ID: "s1"}}]
	n := len(tr.fallbacks)
	tr.mu.Unlock()
	if !s0 || s1 || n != maxFallbacks {
		t.Errorf("fallbacks: s0 kept %v, s1 kept %v, %d in all; want s1's gone, %d in all", s0, s1, n, maxFallbacks)
	}
}

// A decision's upstream context names its owner: the sandbox (its kind
// and preset with it) and the program, by path and hash, so that two
// sandboxes, or two programs in one, never share a connection.
func TestUpstreamContextNamesTheOwner(t *testing.T) {
	base := policies.Input{
		Sandbox: policies.Sandbox{ID: "a", Kind: "coder", Preset: "coder"},
		Process: policies.Process{PID: 10, Exe: "/usr/bin/python3", SHA256: "aa"},
		Request: policies.Request{Host: "api.test", Port: 443},
	}
	owner := func(in policies.Input) poolOwner {
		o, ok := (&decision{in: in}).upstreamContext(context.Background()).Value(ownerKey{}).(poolOwner)
		if !ok {
			t.Fatal("no owner in the upstream context")
		}
		return o
	}
	same := base
	same.Process.PID = 11 // another process of the same program
	if owner(same) != owner(base) {
		t.Error("two processes of one program in one sandbox are two owners")
	}
	for name, change := range map[string]func(*policies.Input){
		"sandbox": func(in *policies.Input) { in.Sandbox.ID = "b" },
		"preset":  func(in *policies.Input) { in.Sandbox.Preset = "strict" },
		"kind":    func(in *policies.Input) { in.Sandbox.Kind = "writer" },
		"binary":  func(in *policies.Input) { in.Process.Exe = "/usr/bin/curl" },
		"hash":    func(in *policies.Input) { in.Process.SHA256 = "bb" },
	} {
		other := base
		change(&other)
		if owner(other) == owner(base) {
			t.Errorf("another %s, the same owner", name)
		}
	}
}

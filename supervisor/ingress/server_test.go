package ingress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// ingress is one route under test, with the keys of its two operators.
type ingress struct {
	srv        *Server
	url        string
	audit      *testutil.Buffer
	alice, bob string
	mu         sync.Mutex
	dialed     []*trackedConn // every connection the route dialled
	// keyChanges are what KeysChanged was told: the number of keys, or
	// the error.
	keyChanges []string
}

// trackedConn is a connection into the "pod" that remembers being closed.
type trackedConn struct {
	net.Conn
	addr   string
	closed atomic.Bool
}

func (c *trackedConn) Close() error { c.closed.Store(true); return c.Conn.Close() }

// startIngress serves a route to port on loopback. Its dialer is a plain
// one standing in for the supervisor's dialer into the pod, and records
// what it is asked to dial.
func startIngress(t *testing.T, port int, with ...func(*Options)) *ingress {
	t.Helper()
	in := &ingress{audit: &testutil.Buffer{}}
	in.alice, _ = NewKey()
	in.bob, _ = NewKey()
	keys, err := LoadKeys(writeKeys(t, "alice "+HashKey(in.alice)+"\nbob "+HashKey(in.bob)+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	o := Options{
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := &trackedConn{Conn: c, addr: addr}
			in.mu.Lock()
			in.dialed = append(in.dialed, tc)
			in.mu.Unlock()
			return tc, nil
		},
		Audit: in.audit,
		KeysChanged: func(n int, err error) {
			in.mu.Lock()
			defer in.mu.Unlock()
			if err != nil {
				in.keyChanges = append(in.keyChanges, "error")
			} else {
				in.keyChanges = append(in.keyChanges, fmt.Sprint(n))
			}
		},
	}
	for _, f := range with {
		f(&o)
	}
	in.srv, err = Listen(Route{Name: "gateway", Listen: "127.0.0.1:0", Service: "gw", Port: port, Keys: keys}, o)
	if err != nil {
		t.Fatal(err)
	}
	in.url = "http://" + in.srv.Addr().String()
	served := make(chan error, 1)
	go func() { served <- in.srv.Serve() }()
	t.Cleanup(func() {
		in.shutdown(t)
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	})
	return in
}

// shutdown stops the route; every audit line is written when it returns.
func (in *ingress) shutdown(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown() = %v", err)
	}
}

// lines parses the audit log, by path: each test request has its own
// line, and an allowed one its admit line before it.
func (in *ingress) lines(t *testing.T) map[string]auditLine {
	t.Helper()
	out := map[string]auditLine{}
	admitted := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(in.audit.String()), "\n") {
		var a auditLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		if a.Route != "gateway" || a.Service != "gw" || a.TS == "" || !strings.HasPrefix(a.Remote, "127.0.0.1:") {
			t.Errorf("audit line %q lacks its constant fields", l)
		}
		switch {
		case a.Msg == AuditAdmitMessage && a.Allowed && a.Status == 0:
			admitted[a.Path] = true
			continue
		case a.Msg != AuditMessage:
			t.Errorf("audit line %q: msg %q", l, a.Msg)
		case a.Allowed && !admitted[a.Path]:
			t.Errorf("allowed request %s has no admit line before its line", a.Path)
		}
		out[a.Path] = a
	}
	return out
}

func port(t *testing.T, rawURL string) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(rawURL, "http://"))
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// curl runs curl with args and returns the status, headers and body.
func curl(t *testing.T, args ...string) (int, http.Header, string) {
	t.Helper()
	bin := testutil.RequireTool(t, "curl")
	out, err := exec.Command(bin, append([]string{"-sS", "-i", "--noproxy", "*", "--max-time", "30"}, args...)...).Output()
	if err != nil {
		t.Fatalf("curl %q: %v", args, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
	if err != nil {
		t.Fatalf("curl %q output %q: %v", args, out, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// echoHeaders is a service that answers with the request headers it got.
func echoHeaders() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(r.Header)
	}))
}

func TestHTTPKeysWithCurl(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL))
	wrong, _ := NewKey() // the right length, stored nowhere
	lastByte := []byte(in.alice)
	lastByte[len(lastByte)-1] ^= 1

	// The requests made (`go test -run` may pick some), and whether one
	// was let through to the service.
	ran, forwarded := map[string]bool{}, false
	for _, tc := range []struct {
		path     string
		headers  []string
		operator string // "" when refused
		reason   string
	}{
		{"/bearer", []string{"Authorization: Bearer " + in.alice}, "alice", ReasonAllowed},
		{"/bearer-lower", []string{"authorization: bearer " + in.alice}, "alice", ReasonAllowed},
		{"/api-key", []string{"X-Api-Key: " + in.bob, "X-Airlock-Operator: alice", "X-Forwarded-For: 192.0.2.1"}, "bob", ReasonAllowed},
		{"/both-same", []string{"Authorization: Bearer " + in.bob, "X-Api-Key: " + in.bob}, "bob", ReasonAllowed},
		// CGI-style services read '_' as '-': the client's spellings of
		// the operator (and of a key) never reach them.
		{"/underscores", []string{"X-Api-Key: " + in.bob, "X_Airlock_Operator: alice", "x_airlock-OPERATOR: alice", "X_Api_Key: " + in.alice}, "bob", ReasonAllowed},
		{"/none", nil, "", ReasonKeyMissing},
		{"/basic", []string{"Authorization: Basic " + in.alice}, "", ReasonKeyMissing},
		{"/empty-bearer", []string{"Authorization: Bearer "}, "", ReasonKeyMissing},
		{"/wrong", []string{"Authorization: Bearer " + wrong}, "", ReasonKeyUnknown},
		{"/last-byte", []string{"X-Api-Key: " + string(lastByte)}, "", ReasonKeyUnknown},
		{"/hash", []string{"X-Api-Key: " + HashKey(in.alice)}, "", ReasonKeyUnknown},
		{"/both-different", []string{"Authorization: Bearer " + in.alice, "X-Api-Key: " + in.bob}, "", ReasonKeyUnknown},
	} {
		t.Run(tc.path, func(t *testing.T) {
			ran[tc.path], forwarded = true, forwarded || tc.operator != ""
			args := []string{in.url + tc.path + "?q=1"}
			for _, h := range tc.headers {
				args = append(args, "-H", h)
			}
			status, h, body := curl(t, args...)
			if tc.operator == "" {
				var ref Refusal
				if err := json.Unmarshal([]byte(body), &ref); err != nil || status != http.StatusUnauthorized ||
					ref.Reason != tc.reason || ref.Route != "gateway" || ref.Error == "" ||
					h.Get("WWW-Authenticate") != `Bearer realm="airlock"` || h.Get("Content-Type") != "application/json" {
					t.Fatalf("curl %s = %d %v %q (%v); want 401 %s with WWW-Authenticate", tc.path, status, h, body, err, tc.reason)
				}
				return
			}
			var seen http.Header
			if err := json.Unmarshal([]byte(body), &seen); err != nil || status != http.StatusOK {
				t.Fatalf("curl %s = %d %q (%v); want 200", tc.path, status, body, err)
			}
			if got := seen.Values(OperatorHeader); len(got) != 1 || got[0] != tc.operator {
				t.Errorf("service saw %s: %q; want [%s]", OperatorHeader, got, tc.operator)
			}
			set := []string{OperatorHeader, "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}
			for name, v := range seen {
				if ownHeader(name) && !slices.Contains(set, name) {
					t.Errorf("service saw %s: %q; want no other spelling of %s or a key header", name, v, OperatorHeader)
				}
			}
			for _, k := range keyHeaders {
				if v := seen.Get(k); v != "" {
					t.Errorf("service saw %s: %q; key headers must not reach it", k, v)
				}
			}
			if seen.Get("X-Forwarded-For") != "127.0.0.1" {
				t.Errorf("service saw X-Forwarded-For %q; want the client, 127.0.0.1, and not what it claimed", seen.Get("X-Forwarded-For"))
			}
		})
	}

	in.shutdown(t)
	log := in.audit.String()
	for _, key := range []string{in.alice, in.bob, wrong, string(lastByte), "?q=1"} {
		if strings.Contains(log, key) {
			t.Errorf("audit log contains %q:\n%s", key, log)
		}
	}
	lines := in.lines(t)
	for path, want := range map[string]auditLine{
		"/bearer":         {Operator: "alice", Allowed: true, Reason: ReasonAllowed, Status: 200},
		"/api-key":        {Operator: "bob", Allowed: true, Reason: ReasonAllowed, Status: 200},
		"/none":           {Operator: UnknownOperator, Reason: ReasonKeyMissing, Status: 401},
		"/wrong":          {Operator: UnknownOperator, Reason: ReasonKeyUnknown, Status: 401},
		"/last-byte":      {Operator: UnknownOperator, Reason: ReasonKeyUnknown, Status: 401},
		"/both-different": {Operator: UnknownOperator, Reason: ReasonKeyUnknown, Status: 401},
	} {
		if !ran[path] {
			continue
		}
		got := lines[path]
		if got.Operator != want.Operator || got.Allowed != want.Allowed || got.Reason != want.Reason || got.Status != want.Status || got.Method != "GET" {
			t.Errorf("audit line for %s = %+v; want %+v", path, got, want)
		}
	}
	if len(lines) != len(ran) {
		t.Errorf("audit log has %d paths, want one line per request (%d):\n%s", len(lines), len(ran), log)
	}
	// The route dials the service's port on the pod's loopback, through
	// the dialer it was given, and closes what it kept open at Shutdown:
	// an idle connection would hold the pod's network namespace alive.
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.dialed) == 0 && forwarded {
		t.Fatal("the route never used its dialer")
	}
	for _, c := range in.dialed {
		if c.addr != "127.0.0.1:"+strconv.Itoa(port(t, backend.URL)) || !c.closed.Load() {
			t.Errorf("dialled %s, closed at Shutdown: %v; want the service port on 127.0.0.1, closed", c.addr, c.closed.Load())
		}
	}
}

// rawService is a service that records the header lines of the one
// request it is sent, as they came on the wire, and answers 200.
func rawService(t *testing.T) (port int, lines <-chan []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		var hdr []string
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if l = strings.TrimRight(l, "\r\n"); l == "" {
				break
			}
			hdr = append(hdr, l)
		}
		got <- hdr[1:] // past the request line
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}()
	return ln.Addr().(*net.TCPAddr).Port, got
}

// cgiName is a header's name as a CGI-style service reads it (PHP's
// $_SERVER, WSGI's environ): upper-cased, each byte but a letter or digit
// a '_', after HTTP_.
func cgiName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return "HTTP_" + string(b)
}

// A CGI-style service reads a header under any punctuation ('.', '_', '~'
// for '-') as the same variable, and the last line of it wins: the
// client's spellings of the headers the ingress controls (the operator,
// the key, the client's address) reach the service not at all, beside the
// ingress's own. Bob's key with X.Airlock.Operator: alice must not be
// alice to PHP.
func TestClientSpellingsOfOwnHeadersNeverReachTheService(t *testing.T) {
	svc, lines := rawService(t)
	in := startIngress(t, svc)
	c, err := net.Dial("tcp", strings.TrimPrefix(in.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /spellings HTTP/1.1\r\nHost: gw.test\r\nX-Api-Key: " + in.bob + "\r\n" +
		"X.Airlock.Operator: alice\r\nX_Airlock_Operator: alice\r\nX~Airlock~Operator: alice\r\n" +
		"X.Api.Key: " + in.alice + "\r\n" +
		"X.Forwarded.For: 192.0.2.1\r\nX_Forwarded_For: 192.0.2.1\r\nX~Forwarded~Host: evil.test\r\n" +
		"X.Forwarded.Proto: https\r\nX-Forwarded-Port: 443\r\nx_forwarded_prefix: /admin\r\n" +
		"X.Real.Ip: 192.0.2.1\r\nX_Real_IP: 192.0.2.1\r\nforwarded: for=192.0.2.1\r\n" +
		"Client-IP: 192.0.2.1\r\nTrue.Client.Ip: 192.0.2.1\r\nCF_Connecting_IP: 192.0.2.1\r\n" +
		"X.Custom.Header: kept\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request with Bob's key: %v %v; want 200", resp, err)
	}
	var hdr []string
	select {
	case hdr = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("the service got no request")
	}
	seen := map[string][]string{}
	for _, l := range hdr {
		name, v, _ := strings.Cut(l, ":")
		seen[cgiName(name)] = append(seen[cgiName(name)], name+":"+strings.TrimSpace(v))
	}
	for name, want := range map[string][]string{
		"HTTP_X_AIRLOCK_OPERATOR": {OperatorHeader + ":bob"},
		"HTTP_X_FORWARDED_FOR":    {"X-Forwarded-For:127.0.0.1"},
		"HTTP_X_FORWARDED_HOST":   {"X-Forwarded-Host:gw.test"},
		"HTTP_X_FORWARDED_PROTO":  {"X-Forwarded-Proto:http"},
		"HTTP_X_FORWARDED_PORT":   nil,
		"HTTP_X_FORWARDED_PREFIX": nil,
		"HTTP_X_REAL_IP":          nil,
		"HTTP_FORWARDED":          nil,
		"HTTP_CLIENT_IP":          nil,
		"HTTP_TRUE_CLIENT_IP":     nil,
		"HTTP_CF_CONNECTING_IP":   nil,
		"HTTP_X_API_KEY":          nil,
		"HTTP_AUTHORIZATION":      nil,
		"HTTP_AUTHORIZATION_":     nil,
		"HTTP_X_AUTHORIZATION":    nil,
		"HTTP_X_CUSTOM_HEADER":    {"X.custom.header:kept"},
	} {
		if !slices.Equal(seen[name], want) {
			t.Errorf("the service read %s from %q; want %q (header lines: %q)", name, seen[name], want, hdr)
		}
	}
}

// A stream's events reach the client as the service sends them, before
// the stream ends: server-sent events, and any other streamed body (a chat
// completion streamed as NDJSON has no event-stream type to be recognised by).
func TestStreamWithCurl(t *testing.T) {
	for _, ctype := range []string{"text/event-stream", "application/x-ndjson"} {
		t.Run(ctype, func(t *testing.T) {
			release := make(chan struct{})
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ctype)
				fmt.Fprint(w, "data: one\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				fmt.Fprint(w, "data: two\n\n")
			}))
			defer backend.Close()
			in := startIngress(t, port(t, backend.URL))

			cmd := exec.Command(testutil.RequireTool(t, "curl"), "-sS", "-N", "--noproxy", "*", "--max-time", "30",
				"-H", "X-Api-Key: "+in.alice, in.url+"/events")
			stdout, _ := cmd.StdoutPipe()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(stdout)
			first, err := r.ReadString('\n')
			if first != "data: one\n" {
				t.Fatalf("first line of the stream = %q, %v (%s); want it before the stream ends", first, err, stderr.String())
			}
			close(release)
			rest, _ := io.ReadAll(r)
			if err := cmd.Wait(); err != nil || string(rest) != "\ndata: two\n\n" {
				t.Fatalf("rest of the stream = %q, curl %v %s", rest, err, stderr.String())
			}
			in.shutdown(t)
			if got := in.lines(t)["/events"]; got.Operator != "alice" || got.Status != 200 || !got.Allowed {
				t.Errorf("audit line = %+v", got)
			}
		})
	}
}

// startWSEcho starts testdata/ws_echo.js and returns its port.
func startWSEcho(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(testutil.RequireTool(t, "node"), "testdata/ws_echo.js")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = &testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var ready struct{ Port int }
	if err := json.NewDecoder(stdout).Decode(&ready); err != nil || ready.Port == 0 {
		t.Fatalf("ws_echo.js did not say its port: %v", err)
	}
	return ready.Port
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

type wsResult struct {
	Status  int
	Headers map[string]string
	Body    string
	Echo    string
}

// wsClient runs testdata/ws_client.py against addr.
func wsClient(t *testing.T, addr, message string, headers ...string) wsResult {
	t.Helper()
	cmd := exec.Command(testutil.RequireTool(t, "python3"), append([]string{"testdata/ws_client.py", addr, message}, headers...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res wsResult
	if err != nil || json.Unmarshal(out, &res) != nil {
		t.Fatalf("ws_client.py = %v %q %s", err, out, stderr.String())
	}
	return res
}

func TestWebSocketRoundTrip(t *testing.T) {
	in := startIngress(t, startWSEcho(t))
	addr := in.srv.Addr().String()
	for _, h := range []string{"X-Api-Key: " + in.alice, "Authorization: Bearer " + in.alice} {
		res := wsClient(t, addr, "hello through the ingress", h, "X-Airlock-Operator: mallory")
		if res.Status != 101 || res.Echo != "hello through the ingress" {
			t.Fatalf("WebSocket with %s = %+v; want 101 and the echo", strings.SplitN(h, ":", 2)[0], res)
		}
		if res.Headers["x-echo-operator"] != "alice" || res.Headers["x-echo-key-headers"] != "none" {
			t.Errorf("service saw operator %q and key headers %q; want alice and none", res.Headers["x-echo-operator"], res.Headers["x-echo-key-headers"])
		}
	}
	wrong, _ := NewKey()
	res := wsClient(t, addr, "x", "X-Api-Key: "+wrong)
	if res.Status != 401 || !strings.Contains(res.Body, ReasonKeyUnknown) {
		t.Fatalf("WebSocket with a wrong key = %+v; want 401 %s", res, ReasonKeyUnknown)
	}
	in.shutdown(t)
	log := in.audit.String()
	if strings.Contains(log, in.alice) || strings.Contains(log, wrong) {
		t.Errorf("audit log contains a key:\n%s", log)
	}
	var statuses []string
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var a auditLine
		json.Unmarshal([]byte(l), &a)
		statuses = append(statuses, fmt.Sprintf("%s %s %d %s", a.Msg, a.Operator, a.Status, a.Reason))
	}
	admit, done := AuditAdmitMessage+" alice 0 ingress_allowed", AuditMessage+" alice 101 ingress_allowed"
	if want := []string{admit, done, admit, done, AuditMessage + " unknown 401 ingress_key_unknown"}; strings.Join(statuses, "|") != strings.Join(want, "|") {
		t.Errorf("audit lines = %q; want %q", statuses, want)
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := port(t, "http://"+ln.Addr().String())
	ln.Close()
	in := startIngress(t, closed)
	status, _, body := curl(t, "-H", "X-Api-Key: "+in.bob, in.url+"/down")
	var ref Refusal
	if err := json.Unmarshal([]byte(body), &ref); err != nil || status != http.StatusBadGateway || ref.Reason != ReasonUpstreamError || !strings.Contains(ref.Error, "service gw on port") {
		t.Fatalf("curl to a down service = %d %q; want 502 %s", status, body, ReasonUpstreamError)
	}
	in.shutdown(t)
	if got := in.lines(t)["/down"]; got.Operator != "bob" || got.Status != 502 || got.Reason != ReasonUpstreamError || !got.Allowed {
		t.Errorf("audit line = %+v", got)
	}
}

func TestListenRefuses(t *testing.T) {
	key, _ := NewKey()
	keys, err := LoadKeys(writeKeys(t, "alice "+HashKey(key)+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var d net.Dialer
	good := Route{Name: "r", Listen: "127.0.0.1:0", Service: "s", Port: 80, Keys: keys}
	opts := Options{Dial: d.DialContext, Audit: io.Discard}
	for _, tc := range []struct {
		name   string
		change func(r *Route, o *Options)
		want   string
	}{
		{"no keys", func(r *Route, o *Options) { r.Keys = nil }, "no operator keys"},
		{"empty keys", func(r *Route, o *Options) { r.Keys = &Keys{} }, "no operator keys"},
		{"no dialer", func(r *Route, o *Options) { o.Dial = nil }, "no dialer into the pod"},
		{"no audit", func(r *Route, o *Options) { o.Audit = nil }, "no audit log"},
		{"no port", func(r *Route, o *Options) { r.Port = 0 }, "port 0 is not 1-65535"},
		{"no service", func(r *Route, o *Options) { r.Service = "" }, "no service"},
		{"taken", func(r *Route, o *Options) { r.Listen = taken.Addr().String() }, "listen " + taken.Addr().String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, o := good, opts
			tc.change(&r, &o)
			if s, err := Listen(r, o); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `route "r"`) {
				if s != nil {
					s.Shutdown(context.Background())
				}
				t.Fatalf("Listen = %v; want an error naming route r and %q", err, tc.want)
			}
		})
	}
}

// Shutdown ends an open WebSocket (http.Server no longer tracks it) and
// returns with its audit line written.
func TestShutdownEndsWebSocket(t *testing.T) {
	in := startIngress(t, startWSEcho(t))
	c, err := net.Dial("tcp", in.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /held HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Api-Key: %s\r\n\r\n", in.alice)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade = %v, %v; want 101", resp, err)
	}
	in.shutdown(t)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound on a failing run, not a timing check
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read on the WebSocket after Shutdown = %d, %v; want EOF", n, err)
	}
	if got := in.lines(t)["/held"]; got.Operator != "alice" || got.Status != 101 {
		t.Errorf("audit line = %+v; want alice's 101", got)
	}
}

// A client that leaves before the service answers is audited as gone,
// not as a failure of the service.
func TestClientGoneBeforeAnswer(t *testing.T) {
	entered := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
	}))
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL))
	c, err := net.Dial("tcp", in.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: gw\r\nX-Api-Key: %s\r\n\r\n", in.alice)
	<-entered
	c.Close()
	in.shutdown(t)
	if got := in.lines(t)["/slow"]; got.Operator != "alice" || got.Reason != ReasonClientGone || !got.Allowed {
		t.Errorf("audit line = %+v; want alice's, %s", got, ReasonClientGone)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A line that cannot be written is logged as an error naming the request
// (never the key): the request has been answered by then.
func TestAuditWriteFailureIsLogged(t *testing.T) {
	key, _ := NewKey()
	keys, err := LoadKeys(writeKeys(t, "alice "+HashKey(key)+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	var d net.Dialer
	s, err := Listen(Route{Name: "r", Listen: "127.0.0.1:0", Service: "s", Port: 80, Keys: keys},
		Options{Dial: d.DialContext, Audit: failingWriter{}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	status, _, _ := curl(t, "-H", "X-Api-Key: "+key+"x", "http://"+s.Addr().String()+"/p")
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := logs.String()
	if status != http.StatusUnauthorized || !strings.Contains(got, `"msg":"ingress audit write failed"`) ||
		!strings.Contains(got, "no space left on device") || !strings.Contains(got, `"path":"/p"`) || strings.Contains(got, key) {
		t.Fatalf("status %d, log:\n%s\nwant the failure logged with the request, without the key", status, got)
	}
}

// An allowed request whose admit line cannot be written is not let in:
// 503 ingress_audit_unavailable, the service never dialled; with the pod's
// audit_failure: warn it is.
func TestIngressAdmitFailsClosed(t *testing.T) {
	key, _ := NewKey()
	keys, err := LoadKeys(writeKeys(t, "alice "+HashKey(key)+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") }))
	defer svc.Close()
	for _, failOpen := range []bool{false, true} {
		var dialed atomic.Int32
		var d net.Dialer
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed.Add(1)
			return d.DialContext(ctx, network, addr)
		}
		s, err := Listen(Route{Name: "r", Listen: "127.0.0.1:0", Service: "s", Port: port(t, svc.URL), Keys: keys},
			Options{Dial: dial, Audit: failingWriter{}, AuditFailOpen: failOpen, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve()
		status, _, body := curl(t, "-H", "X-Api-Key: "+key, "http://"+s.Addr().String()+"/p")
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		switch {
		case !failOpen && (status != http.StatusServiceUnavailable || !strings.Contains(body, ReasonAuditUnavailable) || dialed.Load() != 0):
			t.Errorf("audit log failing: %d %q, %d dials; want 503 %s and the service not dialled", status, body, dialed.Load(), ReasonAuditUnavailable)
		case failOpen && (status != http.StatusOK || body != "served"):
			t.Errorf("audit log failing, audit_failure warn: %d %q; want the service's answer", status, body)
		}
	}
}

// The key file is read again when it changes, at the next request: a key
// replaced stops working at once, a key added works, and a file changed
// into one that cannot be used (malformed, writable by others, gone)
// admits no one, 503, until it is mended: the last good keys would still
// hold the key an operator just removed.
func TestKeyFileChangesTakeEffect(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL))
	path := in.srv.route.Keys.Path()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	status := func(key string) (int, string) {
		t.Helper()
		n++
		code, _, body := curl(t, fmt.Sprintf("%s/%d", in.url, n), "-H", "X-Api-Key: "+key)
		var ref Refusal
		json.Unmarshal([]byte(body), &ref)
		return code, ref.Reason
	}
	want := func(what, key string, code int, reason string) {
		t.Helper()
		if got, why := status(key); got != code || why != reason {
			t.Errorf("%s: %d %q; want %d %q", what, got, why, code, reason)
		}
	}
	want("alice before any change", in.alice, http.StatusOK, "")
	alice2, err := AddKey(path, "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	want("alice's replaced key", in.alice, http.StatusUnauthorized, ReasonKeyUnknown)
	want("alice's new key", alice2, http.StatusOK, "")
	want("bob, untouched", in.bob, http.StatusOK, "")
	carol, err := AddKey(path, "carol", false) // appended in place
	if err != nil {
		t.Fatal(err)
	}
	want("carol, added", carol, http.StatusOK, "")
	for _, tc := range []struct {
		name   string
		break_ func() error
	}{
		{"malformed", func() error { return os.WriteFile(path, []byte("bob not-a-hash\n"), 0o600) }},
		{"writable by others", func() error { return os.Chmod(path, 0o666) }},
		{"gone", func() error { return os.Remove(path) }},
	} {
		if err := tc.break_(); err != nil {
			t.Fatal(err)
		}
		want("bob, the file "+tc.name, in.bob, http.StatusServiceUnavailable, ReasonKeysUnavailable)
		os.Remove(path)
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatal(err)
		}
		want("bob, the file mended after "+tc.name, in.bob, http.StatusOK, "")
		want("alice's first key, back in the mended file", in.alice, http.StatusOK, "")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if got, want := strings.Join(in.keyChanges, " "), "2 3 error 2 error 2 error 2"; got != want {
		t.Errorf("KeysChanged was told %q; want %q", got, want)
	}
	refused := 0
	for path, l := range in.lines(t) {
		if l.Reason == ReasonKeysUnavailable {
			refused++
			if l.Status != http.StatusServiceUnavailable || l.Allowed || l.Operator != UnknownOperator {
				t.Errorf("audit line of %s: %+v; want a 503 refusal of an unknown operator", path, l)
			}
		}
	}
	if refused != 3 {
		t.Errorf("%d audit lines say %s; want one per broken file, 3", refused, ReasonKeysUnavailable)
	}
}

// Anyone who reaches the port writes a line per request, key or not: a
// long path is cut in it, and "OPTIONS *" is refused and written as any
// other request is, not answered by net/http before the key is asked for.
func TestUnauthenticatedRequestsStaySmallInTheLog(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL))
	long := "/" + strings.Repeat("<", 8<<10)
	if status, _, _ := curl(t, in.url+long); status != http.StatusUnauthorized {
		t.Fatalf("a long path, no key: %d; want 401", status)
	}
	if status, _, _ := curl(t, "-X", "OPTIONS", "--request-target", "*", in.url); status != http.StatusUnauthorized {
		t.Fatalf("OPTIONS *, no key: %d; want 401", status)
	}
	in.shutdown(t)
	lines := strings.Split(strings.TrimSpace(in.audit.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit log: %d lines; want one per request:\n%s", len(lines), in.audit.String())
	}
	if len(lines[0]) > 8<<10 || !strings.Contains(lines[0], "(8193 bytes)") {
		t.Errorf("the long path's line is %d bytes: %.200q; want it cut, saying how long the path was", len(lines[0]), lines[0])
	}
	if !strings.Contains(lines[1], `"method":"OPTIONS"`) || !strings.Contains(lines[1], ReasonKeyMissing) {
		t.Errorf("OPTIONS * line: %s; want it refused for want of a key", lines[1])
	}
}

// A route serves at most MaxConns connections at once: with every one of
// them admitted (a keyed request served on it, kept alive), more wait; and
// a refused request's connection ends with its answer, so a client with no
// key holds none of them open. (One with no request admitted yet is
// evicted to make room: TestUnprovenConnectionsCannotLockOutOperators.)
func TestConnectionsAreBounded(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL), func(o *Options) { o.MaxConns = 2 })
	addr := strings.TrimPrefix(in.url, "http://")
	get := func(c net.Conn, key string) (*http.Response, error) {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n\r\n", key)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		return http.ReadResponse(bufio.NewReader(c), nil)
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp, err := get(c, in.alice); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a keyed request: %v, %v; want 200", resp, err)
		}
		held = append(held, c) // kept alive
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	fmt.Fprintf(third, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(third)
	third.SetReadDeadline(time.Now().Add(time.Second))
	if resp, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("a third connection was served (%s) while two were held; want it waiting", resp.Status)
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("once one was closed: %v, %v; want the third served, 401", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the 401: read %d, %v; want the connection closed", n, err)
	}
}

// A key removed from the file ends what it let in that is still open (a
// stream, a WebSocket), whether or not another request comes: a leaked key
// replaced must not keep its session.
func TestRemovedKeyEndsItsStreams(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // streams until the ingress ends it
	}))
	t.Cleanup(backend.Close) // after the route's own cleanup: its handler waits on the route
	in := startIngress(t, port(t, backend.URL))
	open := func(key string) *bufio.Reader {
		req, _ := http.NewRequest(http.MethodGet, in.url+"/events", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("open a stream: %v, %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		br := bufio.NewReader(resp.Body)
		if event, err := br.ReadString('\n'); event != "data: one\n" {
			t.Fatalf("the stream's first line: %q, %v", event, err)
		}
		if blank, err := br.ReadString('\n'); blank != "\n" {
			t.Fatalf("the stream's first event's end: %q, %v", blank, err)
		}
		return br
	}
	alices, bobs := open(in.alice), open(in.bob)
	if _, err := AddKey(in.srv.route.Keys.Path(), "alice", true); err != nil { // alice's key replaced
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(alices); ended <- err }()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("alice's stream still open 20 s after her key was replaced")
	}
	// bob's key is still in the file: his stream goes on.
	go func() { _, err := bobs.ReadByte(); ended <- err }()
	select {
	case err := <-ended:
		t.Fatalf("bob's stream ended (%v); his key still admits", err)
	case <-time.After(2 * keyRecheck):
	}
}

// Refusals for want of a key past refusalLines in an interval are summed
// up in one line per reason, not written one by one: anyone who reaches
// the port may send them as fast as it likes.
func TestUnkeyedRefusalsAreSummedUp(t *testing.T) {
	defer func(d time.Duration) { refusalInterval = d }(refusalInterval)
	refusalInterval = time.Hour // one interval, ended by the shutdown
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL))
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	const sent = 3 * refusalLines
	for i := range sent {
		resp, err := c.Get(fmt.Sprintf("%s/%d", in.url, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d: %d; want 401", i, resp.StatusCode)
		}
	}
	in.shutdown(t) // ends the interval: its summary is written
	var one, summed int64
	for _, l := range strings.Split(strings.TrimSpace(in.audit.String()), "\n") {
		var a auditLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatal(err)
		}
		if a.Reason != ReasonKeyMissing || a.Status != http.StatusUnauthorized {
			t.Fatalf("line %s; want refusals for want of a key only", l)
		}
		if a.Count > 0 {
			summed += a.Count
		} else {
			one++
		}
	}
	if one+summed != sent || one != refusalLines {
		t.Fatalf("%d lines one by one and %d refusals summed up; want all %d on record, at most %d of them one by one", one, summed, sent, refusalLines)
	}
}

package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/net/websocket"
)

// A sandbox holding as many connections as --max-conns allows gets its next
// one answered 503 connection_limit, with the JSON body and the audit line
// of any refusal, and closed; once a connection ends, the next is served.
func TestConnectionLimit(t *testing.T) {
	w := newWorld(t, "--max-conns", "2")
	tunnel := fmt.Sprintf("tunnel.test:%d", w.tlsPort)
	first := connectThrough(t, w.proxy.addr, tunnel)
	second := connectThrough(t, w.proxy.addr, tunnel)
	defer second.Close()

	c, err := net.Dial("tcp", w.proxy.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tunnel, tunnel)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("third connection: %v; want a 503 answer", err)
	}
	var body struct{ Reason, Hint string }
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Airlock-Reason") != "connection_limit" ||
		body.Reason != "connection_limit" || !strings.Contains(body.Hint, "--max-conns") {
		t.Fatalf("third connection: %s %q %+v; want 503 connection_limit naming --max-conns", resp.Status, resp.Header.Get("X-Airlock-Reason"), body)
	}
	w.proxy.audit(t, func(a auditLine) bool {
		return a.Reason == "connection_limit" && a.Decision == "deny" && a.Status == 503
	})

	// The slot comes back when the tunnel's relay has ended, a moment after
	// the client closes it.
	first.Close()
	cl := w.goClient(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cl.Get(fmt.Sprintf("https://api.test:%d/v1/hello", w.tlsPort))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "hello from api.test" {
				break
			}
			t.Logf("after a slot was freed: %s %s", resp.Status, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request served after a connection was released: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The flags of the other limits reach the proxy: an opaque tunnel or a
// WebSocket moving no data is closed after --tunnel-idle-timeout, and the
// audit line says so; a
// request header dribbled inside an inspected tunnel is cut off after
// --read-header-timeout, not left to the (two minute) idle timeout, and
// the cut is audited, plain and inspected.
func TestTimeoutFlags(t *testing.T) {
	w := newWorld(t, "--tunnel-idle-timeout", "1s", "--read-header-timeout", "1s")

	t.Run("tunnel idle", func(t *testing.T) {
		c := connectThrough(t, w.proxy.addr, fmt.Sprintf("tunnel.test:%d", w.tlsPort))
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("silent tunnel read = %v; want EOF (closed by the proxy)", err)
		}
		a := w.proxy.closed(t, func(a auditLine) bool { return a.Host == "tunnel.test" && strings.Contains(a.Detail, "without data") })
		if !strings.Contains(a.Detail, "--tunnel-idle-timeout") {
			t.Errorf("audit detail %q does not name the flag", a.Detail)
		}
	})

	t.Run("quiet websocket", func(t *testing.T) {
		conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("ws.test:%d", w.tlsPort))
		defer conn.Close()
		tc := tls.Client(conn, &tls.Config{ServerName: "ws.test", RootCAs: poolOf(t, w.proxy.caFile)})
		cfg, _ := websocket.NewConfig(fmt.Sprintf("wss://ws.test:%d/echo", w.tlsPort), fmt.Sprintf("https://ws.test:%d", w.tlsPort))
		ws, err := websocket.NewClient(cfg, tc)
		if err != nil {
			t.Fatalf("websocket handshake through the proxy: %v", err)
		}
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		var msg string
		if err := websocket.Message.Receive(ws, &msg); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
			t.Fatalf("quiet websocket read = %q, %v; want it closed by the proxy", msg, err)
		}
		w.proxy.closed(t, func(a auditLine) bool {
			return a.Host == "ws.test" && a.Status == 101 && strings.Contains(a.Detail, "--tunnel-idle-timeout")
		})
	})

	t.Run("slow header in an inspected tunnel", func(t *testing.T) {
		raw := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
		defer raw.Close()
		tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
		if _, err := io.WriteString(tc, "GET /v1/hello HTTP/1.1\r\nHost: api.test\r\n"); err != nil {
			t.Fatal(err)
		}
		tc.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := tc.Read(make([]byte, 1))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("an unfinished request header held the inspected tunnel for 20s; want it closed after --read-header-timeout")
		}
		if err == nil {
			t.Fatal("the proxy answered an unfinished request header")
		}
		w.proxy.audit(t, func(a auditLine) bool {
			return a.Host == "api.test" && a.Reason == "invalid_request" && strings.Contains(a.Detail, "--read-header-timeout")
		})
	})

	// The same on the plain path, where http.Server cuts the header off
	// and closes without a word: the cut is a refusal on record.
	t.Run("slow plain header", func(t *testing.T) {
		c, err := net.Dial("tcp", w.proxy.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://plain.test/slow-header HTTP/1.1\r\nHost: plain.test\r\n")
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("an unfinished request header held the connection for 20s")
		}
		a := w.proxy.audit(t, func(a auditLine) bool {
			return a.Reason == "invalid_request" && a.Phase == "request" && a.Host == "" && strings.Contains(a.Detail, "--read-header-timeout")
		})
		if a.Decision != "deny" || a.Binary == "" {
			t.Errorf("audit line %+v; want a denial attributed to the test binary", a)
		}
	})
}

// An upstream that does not answer is given up after
// --upstream-header-timeout. A client that stops reading a response (curl
// writing into a pipe nobody reads, as `curl URL | less` left alone) is
// cut after --write-timeout without progress, plain and inside an
// inspected tunnel, where it would hold its connection and the upstream's
// for ever; the audit line says why, and the client, once it reads again,
// finds its answer cut short, never whole.
func TestWriteAndUpstreamHeaderTimeouts(t *testing.T) {
	w := newWorld(t, "--write-timeout", "1s", "--upstream-header-timeout", "1s")

	// The other end: an upstream that does not answer is given up after
	// --upstream-header-timeout, with a 502 that says so.
	status, body := w.curlCmd(t, w.curl, fmt.Sprintf("https://api.test:%d/v1/hold", w.tlsPort))
	if d := parseDenial(t, body); status != http.StatusBadGateway || d.Reason != "upstream_error" || !strings.Contains(d.Hint, "awaiting response headers") {
		t.Fatalf("request to an upstream that never answers = %d %+v; want 502 upstream_error after --upstream-header-timeout", status, d)
	}
	for _, tc := range []struct{ name, host, url string }{
		{"plain", "plain.test", fmt.Sprintf("http://plain.test:%d/endless", w.plainPort)},
		{"inspected", "api.test", fmt.Sprintf("https://api.test:%d/v1/framing/endless", w.tlsPort)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			cmd := exec.Command(w.curl, "-sS", "-o", "-", "-x", w.proxy.url, "--cacert", w.proxy.caFile, tc.url)
			cmd.Env = cleanEnv()
			cmd.Stdout = in
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			in.Close()
			defer cmd.Process.Kill()
			a := w.proxy.closed(t, func(a auditLine) bool { return a.Host == tc.host && strings.Contains(a.Detail, "--write-timeout") })
			if a.Decision != "allow" || a.Down == 0 {
				t.Errorf("audit line of the stalled client: %+v", a)
			}
			io.Copy(io.Discard, out)
			if err := cmd.Wait(); exitCode(err) == 0 {
				t.Fatal("curl read the endless response to a clean end after the proxy cut it")
			}
		})
	}
}

// A proxy whose --max-conns may need more file descriptors than
// RLIMIT_NOFILE allows would fail connections (as identity_unknown) before
// the limit answered 503: it says so at start, naming the numbers and the
// fix. One whose --max-conns fits says nothing.
func TestMaxConnsCheckedAgainstFileLimit(t *testing.T) {
	prlimit := testutil.RequireTool(t, "prlimit")
	dir := t.TempDir()
	// A proxy that started anyway is stopped after a while, and fails the
	// test.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	proxy := func(maxConns string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, prlimit, "--nofile=2048:2048", "--", airlockBin, "proxy", "--listen", "127.0.0.1:0", "--preset", "strict",
			"--ca-dir", filepath.Join(dir, "ca"), "--audit-log", filepath.Join(dir, "audit.log"), "--max-conns", maxConns)
		cmd.Env = cleanEnv()
		return cmd
	}
	// started reads the proxy's log until it listens and returns what it
	// logged before.
	started := func(maxConns string) string {
		cmd := proxy(maxConns)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Signal(os.Interrupt)
		var before strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "airlock proxy listening on ") {
				return before.String()
			}
			before.WriteString(sc.Text() + "\n")
		}
		t.Fatalf("airlock proxy --max-conns %s under ulimit -n 2048 did not start:\n%s", maxConns, before.String())
		return ""
	}
	out := started("5000")
	for _, want := range []string{"--max-conns 5000", "RLIMIT_NOFILE allows 2048", "lower --max-conns to at most 480", "ulimit -n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("airlock proxy --max-conns 5000 under ulimit -n 2048 logged\n%s\nwant a warning naming %q", out, want)
		}
	}
	if out := started("100"); strings.Contains(out, "RLIMIT_NOFILE") {
		t.Fatalf("--max-conns 100 fits in 2048 descriptors, yet:\n%s", out)
	}
}

// A request body its client stops sending ends after --idle-timeout with a
// 400 that says so, plain and inspected, instead of holding the request,
// and an upstream waiting for the rest, for as long as the client stays.
// And whatever else answers such a request first (a denial, an upstream
// answering before the body's end, one that cannot be reached) is not held
// back by the body either: the proxy reads what is left of it for a moment
// at most, then answers and closes.
func TestStalledBodyTimeout(t *testing.T) {
	w := newWorld(t, "--idle-timeout", "1s", "--resolve", "closed.test:1:127.0.0.2")
	const head = "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\nthe first bytes of a body that stops here"
	plain := func(host, path string) func() net.Conn {
		return func() net.Conn {
			c, err := net.Dial("tcp", w.proxy.addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, head, "http://"+host+path, host)
			return c
		}
	}
	inspected := func(path string) func() net.Conn {
		return func() net.Conn {
			host := fmt.Sprintf("upload.test:%d", w.tlsPort)
			tc := tls.Client(connectThrough(t, w.proxy.addr, host), &tls.Config{ServerName: "upload.test", RootCAs: poolOf(t, w.proxy.caFile)})
			fmt.Fprintf(tc, head, path, host)
			return tc
		}
	}
	plainHost := fmt.Sprintf("plain.test:%d", w.plainPort)
	stalled := "the request body stopped arriving: nothing came for 1s (--idle-timeout)"
	for _, tc := range []struct {
		name, host, path string
		send             func() net.Conn // sends head, and the connection it is answered on
		status           int
		hint             string // in the denial; "" for an upstream's answer
	}{
		{"plain", "plain.test", "/stall", plain(plainHost, "/stall"), 400, stalled},
		{"inspected", "upload.test", "/stall", inspected("/stall"), 400, stalled},
		{"plain denied", "plain.test", "/denied", plain(plainHost, "/denied"), 403, "is not allowed"},
		{"plain answered early", "plain.test", "/answer", plain(plainHost, "/answer"), 200, ""},
		// The client stops sending once answered: the answer, relayed
		// past the idle time, is not cut.
		{"plain answered early, slowly", "plain.test", "/answer", plain(plainHost, "/answer?size=30000&pause=1500ms"), 200, ""},
		{"inspected answered early, slowly", "upload.test", "/early", inspected("/early?size=30000&pause=1500ms"), 200, ""},
		{"plain upstream refused", "closed.test", "/stall", plain("closed.test:1", "/stall"), 502, "could not be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.send()
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !resp.Close || err != nil {
				t.Fatalf("stalled body = %d %.200s (close %v, %v); want %d, whole, and the connection closed", resp.StatusCode, body, resp.Close, err, tc.status)
			}
			if tc.hint == "" {
				return
			}
			if d := parseDenial(t, string(body)); !strings.Contains(d.Hint, tc.hint) {
				t.Fatalf("denial %+v; want its hint to say %q", d, tc.hint)
			}
			w.proxy.outcome(t, func(a auditLine) bool {
				return a.Host == tc.host && a.Path == tc.path && a.Status == tc.status
			})
		})
	}
}

// An upstream that answers a plain request before its body has all
// arrived has its whole answer relayed, however long, while the client
// is still sending, and the connection closes after it: what is left of
// the body cannot be told from a next request. One that answers with a
// switch nobody asked for is refused as promptly, whatever the body. And a
// refused request whose body has arrived whole keeps its connection for
// the next one.
func TestPlainEarlyAnswerWhileTheBodyArrives(t *testing.T) {
	w := newWorld(t)
	host := fmt.Sprintf("plain.test:%d", w.plainPort)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", w.proxy.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}

	t.Run("answered early", func(t *testing.T) {
		c, br := dial()
		const size = 64 << 10
		fmt.Fprintf(c, "POST http://%s/answer?size=%d HTTP/1.1\r\nHost: %s\r\nContent-Length: 10240\r\n\r\n", host, size, host)
		go func() {
			time.Sleep(100 * time.Millisecond)
			c.Write(make([]byte, 10240))
		}()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(got) != size || err != nil || !resp.Close {
			t.Fatalf("early answer = %d, %d of %d bytes (%v), close %v; want 200, all of it, and the connection closed", resp.StatusCode, len(got), size, err, resp.Close)
		}
		w.proxy.closed(t, func(a auditLine) bool { return a.Path == "/answer" && a.Status == 200 && a.Down == size })
	})

	t.Run("unasked switch", func(t *testing.T) {
		c, br := dial()
		fmt.Fprintf(c, "POST http://%s/answer?switch HTTP/1.1\r\nHost: %s\r\nContent-Length: 10240\r\n\r\nsome", host, host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a switch nobody asked for, the body pending (the idle timeout is 2m): %v", err)
		}
		if resp.StatusCode != http.StatusBadGateway || !resp.Close {
			t.Fatalf("unasked switch = %d close %v; want 502 and the connection closed", resp.StatusCode, resp.Close)
		}
	})

	t.Run("refused, body whole", func(t *testing.T) {
		c, br := dial()
		for i := range 2 {
			fmt.Fprintf(c, "POST http://%s/denied HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\nhello", host, host)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("refusal %d on one connection: %v", i+1, err)
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusForbidden || resp.Close {
				t.Fatalf("refusal %d = %d close %v; want 403, the connection kept", i+1, resp.StatusCode, resp.Close)
			}
		}
	})
}

package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/vishvananda/netns"
)

const soloPreset = `package airlock.presets.solo

import data.airlock.lib

rules := [
	{"name": "up", "binaries": [{"path": %[1]q}], "hosts": ["up.test"], "ports": [%[2]d]},
]

denies := []

decision := lib.decide(rules, denies)
`

// soloProxy is a proxy for one sandbox (this test process's tree) whose
// one rule lets the test binary reach up.test, pinned to upstream (on
// 127.0.0.9), opaque; its explicit listener serves until Shutdown.
type soloProxy struct {
	p      *Proxy
	e      *Egress
	audit  *testutil.Buffer
	addr   netip.AddrPort // the explicit listener
	served chan error
	exe    string
}

func newSoloProxy(t *testing.T, upstream net.Listener) *soloProxy {
	t.Helper()
	dir := t.TempDir()
	sp := &soloProxy{audit: &testutil.Buffer{}, served: make(chan error, 1), exe: testExe(t)}
	port := upstream.Addr().(*net.TCPAddr).Port
	engine := presetEngine(t, presetBundle(t, dir, map[string]string{"solo.rego": fmt.Sprintf(soloPreset, sp.exe, port)}))
	quiet := slog.New(slog.DiscardHandler)
	ca, err := certs.LoadOrCreate(filepath.Join(dir, "ca"), 16)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := egress.New(egress.Options{AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.9/32")},
		Resolve: []string{fmt.Sprintf("up.test:%d:127.0.0.9", port)}})
	if err != nil {
		t.Fatal(err)
	}
	if sp.p, err = New(Config{Decider: engine, CA: ca, Guard: guard, Audit: sp.audit, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if sp.e, err = sp.p.Open(Sandbox{ID: "solo", Preset: "solo", Candidates: identity.Tree(os.Getpid()), NetNS: netns.None()}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sp.addr = netip.MustParseAddrPort(ln.Addr().String())
	go func() { sp.served <- sp.e.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sp.p.Shutdown(ctx)
	})
	return sp
}

// client is a connection to the explicit listener from another process
// running the test binary (tpFixture.clientTo), which the rule allows.
func (sp *soloProxy) client(t *testing.T) net.Conn {
	return (&tpFixture{exe: sp.exe}).clientTo(t, sp.addr)
}

// A plain request in flight through the explicit proxy when Shutdown's
// grace runs out (a stream that never ends) is ended before Shutdown
// returns: its connection closed, its slot given back, its close line
// written.
func TestShutdownEndsPlainRequests(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	port := up.Addr().(*net.TCPAddr).Port
	stop := make(chan struct{})
	defer close(stop)
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})}
	go srv.Serve(up)
	defer srv.Close()
	sp := newSoloProxy(t, up)
	p, e, audit, served := sp.p, sp.e, sp.audit, sp.served
	c := sp.client(t)
	fmt.Fprintf(c, "GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); resp.StatusCode != http.StatusOK || line != "tick\n" {
		t.Fatalf("the stream began %d %q, %v", resp.StatusCode, line, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	serr := p.Shutdown(ctx)
	cancel()
	if !errors.Is(serr, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v; want its grace run out", serr)
	}
	if n := e.st.active.Load(); n != 0 {
		t.Errorf("%d connection slots held after Shutdown", n)
	}
	closed := false
	for _, l := range auditLines(t, []byte(audit.String())) {
		closed = closed || l["msg"] == AuditCloseMessage && l["host"] == "up.test"
	}
	if !closed {
		t.Errorf("no close line for the stream when Shutdown returned:\n%s", audit.String())
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v", err)
	}
	// What was on its way may still arrive; then the connection ends.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := body.ReadString('\n'); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Error("the stream still flowed 10s after Shutdown returned")
			}
			break
		}
	}
}

// A tunnel its upstream resets ends on record with the reason: a close
// line whose detail says what ended it, not a clean end.
func TestTunnelResetIsOnRecord(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	testutil.ServeConns(up, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		c.(*net.TCPConn).SetLinger(0) // the close is a reset
		c.Close()
	})
	sp := newSoloProxy(t, up)
	c := sp.client(t)
	port := up.Addr().(*net.TCPAddr).Port
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v, %v", resp, err)
	}
	io.WriteString(c, "hello\n")
	io.Copy(io.Discard, br) // until the tunnel ends
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var detail any
		for _, l := range auditLines(t, []byte(sp.audit.String())) {
			if l["msg"] == AuditCloseMessage && l["host"] == "up.test" {
				detail = l["detail"]
			}
		}
		if s, _ := detail.(string); strings.Contains(s, "reset") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reset tunnel's close line has detail %v; want the reset named:\n%s", detail, sp.audit.String())
		}
	}
}

package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/vishvananda/netns"
)

// A sandbox's listeners share its --max-conns: a connection held through
// the explicit proxy counts against the transparent listener's, and one
// over the limit there is reset (its client speaks TLS or SSH, in which an
// HTTP 503 is garbage) and audited as connection_limit, via transparent.
func TestEgressListenersShareTheLimit(t *testing.T) {
	audit := &testutil.Buffer{}
	p := denyingProxy(t, Config{Audit: audit, Limits: Limits{MaxConns: 1}})
	e, err := p.Open(Sandbox{ID: "shared", Preset: "none", Candidates: identity.Tree(os.Getpid()), NetNS: netns.None()})
	if err != nil {
		t.Fatal(err)
	}
	explicit, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	transparent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	go func() { served <- e.Serve(explicit) }()
	go func() { served <- e.ServeTransparent(transparent) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
		for range 2 {
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
		e.Close()
	})

	held, err := net.Dial("tcp", explicit.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for deadline := time.Now().Add(5 * time.Second); e.st.active.Load() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the explicit listener never took the connection")
		}
	}
	// The reset may come before the dialler has seen its connect
	// succeed: then Dial itself reports it.
	n := 0
	c, err := net.Dial("tcp", transparent.Addr().String())
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("\x16\x03\x01")) // a ClientHello begins
		n, err = c.Read(make([]byte, 64))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("over the shared limit, the transparent connection read %d bytes, err %v; want a reset", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(audit.String(), `"reason":"connection_limit"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no connection_limit line:\n%s", audit.String())
		}
	}
	if line := audit.String(); !strings.Contains(line, `"via":"transparent"`) {
		t.Errorf("the refusal is not marked transparent:\n%s", line)
	}
}

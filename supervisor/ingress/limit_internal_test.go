package ingress

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// connLimit's states, step by step on real loopback connections: only an
// unproven connection is evicted, oldest first, a refused one before the
// rest; one being checked or proven never is; an evicted one can neither
// be checked nor proven, and its own Close frees nothing twice; with every
// slot proven a new connection waits; Close cuts the unproven only.
func TestConnLimitStates(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var evictions atomic.Int32
	l := newConnLimit(inner, 3, func() { evictions.Add(1) })
	defer l.Close()
	clients := map[*routeConn]net.Conn{}
	accept := func() *routeConn {
		t.Helper()
		client, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		clients[c.(*routeConn)] = client
		return c.(*routeConn)
	}
	open := func(want int) {
		t.Helper()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open != want {
			t.Fatalf("%d connections held; want %d", l.open, want)
		}
	}
	evicted := func(c *routeConn, want bool) {
		t.Helper()
		if got := closedWithin(clients[c], 100*time.Millisecond); got != want {
			t.Fatalf("connection closed: %v; want %v", got, want)
		}
	}

	a, b, c := accept(), accept(), accept()
	a.check() // its request is being checked
	b.prove() // admitted
	d := accept()
	evicted(c, true) // the only unproven one
	evicted(a, false)
	evicted(b, false)
	if c.check() || c.prove() {
		t.Error("an evicted connection was checked or proven")
	}
	c.Close()
	open(3)
	a.checked() // refused: evictable again, first in line
	e := accept()
	evicted(a, true)
	evicted(d, false)
	d.prove()
	f := accept()
	evicted(e, true)
	f.prove()
	open(3)
	if evictions.Load() != 3 {
		t.Errorf("%d evictions told; want 3", evictions.Load())
	}

	// Every slot proven: the next connection waits for one to close.
	client, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		got <- c
	}()
	select {
	case <-got:
		t.Fatal("accepted with every slot proven; want it waiting")
	case <-time.After(300 * time.Millisecond):
	}
	d.Close()
	g := (<-got).(*routeConn)
	clients[g] = client
	open(3)

	l.Close()
	evicted(g, true)
	evicted(b, false)
	evicted(f, false)
	open(2)
	b.Close()
	f.Close()
	open(0)
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v; want net.ErrClosed", err)
	}
	if evictions.Load() != 3 {
		t.Errorf("%d evictions told; want 3: Close's cuts are no evictions", evictions.Load())
	}
}

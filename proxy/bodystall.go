package proxy

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// bodyGuard ends a request body its client stops sending: a read that
// waits longer than --idle-timeout fails, and says why. The transport reads
// the body in a goroutine of its own, and reports even an upstream's
// failure only once that read returns (net/http's writeLoop): without the
// guard, a client that stalls mid-body holds its request, and its answer,
// for as long as it keeps the connection.
type bodyGuard struct {
	r io.Reader
	// set sets the client connection's read deadline.
	set func(time.Time) error
	d   time.Duration

	mu    sync.Mutex
	until time.Time // the deadline armed; zero when none is
	done  bool
}

func newBodyGuard(r io.Reader, set func(time.Time) error, d time.Duration) *bodyGuard {
	return &bodyGuard{r: r, set: set, d: d}
}

func (g *bodyGuard) Read(b []byte) (int, error) {
	if !g.arm() {
		return g.r.Read(b)
	}
	n, err := g.r.Read(b)
	switch {
	case err == io.EOF:
		// Whatever reads the connection next (the next request, a
		// server's background read) must not inherit the deadline.
		g.stop()
	case err != nil && isTimeout(err):
		err = &bodyStalledError{d: g.d}
	}
	return n, err
}

// arm pushes the deadline d away, once less than 7/8 of d is left rather
// than before every read. It reports false once the guard has stopped.
func (g *bodyGuard) arm() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	if now := time.Now(); g.until.Sub(now) < g.d-g.d/8 {
		g.until = now.Add(g.d)
		g.set(g.until)
	}
	return true
}

// stop clears the deadline and arms none again: the request is over, or
// its body is the caller's to drain or abandon, and the transport may
// still be reading it.
func (g *bodyGuard) stop() {
	if g == nil { // no body
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done && !g.until.IsZero() {
		g.set(time.Time{})
	}
	g.done = true
}

// bodyStalledError is a request body that stopped arriving.
type bodyStalledError struct{ d time.Duration }

func (e *bodyStalledError) Error() string {
	return fmt.Sprintf("the request body stopped arriving: nothing came for %s (--idle-timeout)", e.d)
}

package proxy

import (
	"errors"
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
// for as long as it keeps the connection. And once the proxy is done with
// the request, abandon ends that goroutine's reading before anything else
// reads the connection.
type bodyGuard struct {
	r io.Reader
	// set sets the client connection's read deadline.
	set func(time.Time) error
	d   time.Duration

	mu      sync.Mutex
	until   time.Time // the deadline armed; zero when none is
	done    bool
	reading sync.WaitGroup // reads under way
}

func newBodyGuard(r io.Reader, set func(time.Time) error, d time.Duration) *bodyGuard {
	return &bodyGuard{r: r, set: set, d: d}
}

// errBodyAbandoned is a read of a body the proxy is done with.
var errBodyAbandoned = errors.New("request body abandoned: the request is over")

func (g *bodyGuard) Read(b []byte) (int, error) {
	if !g.begin() {
		return 0, errBodyAbandoned
	}
	n, err := g.r.Read(b)
	g.reading.Done()
	switch {
	case err == io.EOF:
		// Whatever reads the connection next (the next request, a
		// server's background read) must not inherit the deadline.
		g.stop()
	case err != nil && isTimeout(err):
		err = &bodyStalledError{d: g.d}
		if g.abandoned() {
			err = errBodyAbandoned
		}
	}
	return n, err
}

func (g *bodyGuard) abandoned() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done
}

// begin counts a read in and pushes the deadline d away, once less than
// 7/8 of d is left rather than before every read. It reports false once
// the guard has stopped.
func (g *bodyGuard) begin() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	g.reading.Add(1)
	if now := time.Now(); g.until.Sub(now) < g.d-g.d/8 {
		g.until = now.Add(g.d)
		g.set(g.until)
	}
	return true
}

// stop clears the deadline and arms none again: the body was read to its
// end, or its reader has returned (a failed round trip waits for it).
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

// abandon ends the reading of a body the proxy is done with, which the
// transport may still be reading (the upstream answered before its end):
// a read under way returns at once, none begins, and once none is left the
// connection's read deadline is linger from now (none for 0), for what
// reads it next.
func (g *bodyGuard) abandon(linger time.Duration) {
	if g == nil {
		return
	}
	g.mu.Lock()
	wasDone := g.done
	g.done = true
	if !wasDone {
		g.set(aLongTimeAgo)
	}
	g.mu.Unlock()
	if wasDone {
		return
	}
	g.reading.Wait()
	if linger > 0 {
		g.set(time.Now().Add(linger))
	} else {
		g.set(time.Time{})
	}
}

// bodyStalledError is a request body that stopped arriving.
type bodyStalledError struct{ d time.Duration }

func (e *bodyStalledError) Error() string {
	return fmt.Sprintf("the request body stopped arriving: nothing came for %s (--idle-timeout)", e.d)
}

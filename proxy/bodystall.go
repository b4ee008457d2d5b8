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
	state   guardState
	until   time.Time      // the deadline armed; zero when none is
	reading sync.WaitGroup // reads under way
	// onEOF, when set, is called once the body has been read to its end.
	onEOF func()
}

// guardState is where a body's reading is.
type guardState int

const (
	// guardReading: the transport reads it, each read under the deadline.
	guardReading guardState = iota
	// guardAnswered: the upstream answered before its end; the reading
	// goes on with no deadline until abandon, after the answer has been
	// relayed (a client that stops sending then, as curl does on an
	// early refusal, must not cut the answer it is reading).
	guardAnswered
	// guardEnded: read to its end.
	guardEnded
	// guardStopped: the transport stopped before its end (a failed round
	// trip, which waited for its reads): the rest is the caller's.
	guardStopped
	// guardAbandoned: the proxy is done with it; no read begins.
	guardAbandoned
)

// open reports whether the transport may still read the body.
func (s guardState) open() bool { return s == guardReading || s == guardAnswered }

func newBodyGuard(r io.Reader, set func(time.Time) error, d time.Duration) *bodyGuard {
	return &bodyGuard{r: r, set: set, d: d}
}

// errBodyAbandoned is a read of a body the proxy is done with.
var errBodyAbandoned = errors.New("request body abandoned: the request is over")

func (g *bodyGuard) Read(b []byte) (int, error) {
	switch g.begin() {
	case guardAbandoned:
		return 0, errBodyAbandoned
	case guardEnded, guardStopped:
		// At its end (nothing reads a body stopped otherwise), which is
		// said again without asking the reader: net/http's transport
		// reads once more past Content-Length, and by then the server
		// may have closed its request's body (it does, when it writes
		// the answer): that read's error would cut the upstream
		// connection, and the answer being relayed from it.
		return 0, io.EOF
	}
	n, err := g.r.Read(b)
	g.reading.Done()
	switch {
	case err == io.EOF:
		// Whatever reads the connection next (the next request, a
		// server's background read) must not inherit the deadline.
		if g.close(guardEnded) && g.onEOF != nil {
			g.onEOF()
		}
	case err != nil && isTimeout(err):
		err = &bodyStalledError{d: g.d}
		if g.current() == guardAbandoned {
			err = errBodyAbandoned
		}
	}
	return n, err
}

// begin counts a read in and, while the guard reads under its deadline,
// pushes the deadline d away, once less than 7/8 of d is left rather than
// before every read. It returns the state it found.
func (g *bodyGuard) begin() guardState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.state.open() {
		return g.state
	}
	g.reading.Add(1)
	if now := time.Now(); g.state == guardReading && g.until.Sub(now) < g.d-g.d/8 {
		g.until = now.Add(g.d)
		g.set(g.until)
	}
	return g.state
}

func (g *bodyGuard) current() guardState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// close moves an open guard to state (ended or stopped), clearing the
// deadline; it reports whether it was open.
func (g *bodyGuard) close(state guardState) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.state.open() {
		return false
	}
	g.clear()
	g.state = state
	return true
}

// clear clears the armed deadline, if any. Called with mu held.
func (g *bodyGuard) clear() {
	if !g.until.IsZero() {
		g.until = time.Time{}
		g.set(time.Time{})
	}
}

// stop marks the body's reading over before its end: a failed round trip,
// which waited for its reads.
func (g *bodyGuard) stop() {
	if g != nil { // nil: no body
		g.close(guardStopped)
	}
}

// answer marks the upstream's answer arrived before the body's end, and
// reports whether it did (the body still being read): from now on no
// deadline is armed, and the one armed is cleared; abandon ends the
// reading.
func (g *bodyGuard) answer() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != guardReading {
		return false
	}
	g.clear()
	g.state = guardAnswered
	return true
}

// Close leaves the body to its server: the request's counter closes its
// reader, and the body is not the proxy's to close.
func (g *bodyGuard) Close() error { return nil }

// unread is the body's reader when what is left of it is the caller's to
// read (the transport stopped before its end), else nil.
func (g *bodyGuard) unread() io.Reader {
	if g == nil || g.current() != guardStopped {
		return nil
	}
	return g.r
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
	if !g.state.open() { // at its end, or stopped: nothing reads it
		g.mu.Unlock()
		return
	}
	g.state = guardAbandoned
	g.set(aLongTimeAgo)
	g.mu.Unlock()
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

// lateWatch is a watchClient begun from another goroutine (the
// transport's, at a body's end), and ended by the request's own.
type lateWatch struct {
	mu    sync.Mutex
	stop  func()
	ended bool
}

// start begins the watch, unless the request has ended.
func (w *lateWatch) start(begin func() (stop func())) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.stop = begin()
	}
}

// end ends the watch, if it began, before the connection is read again.
func (w *lateWatch) end() {
	w.mu.Lock()
	w.ended = true
	stop := w.stop
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

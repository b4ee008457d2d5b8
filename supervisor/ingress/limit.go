package ingress

import (
	"container/list"
	"context"
	"net"
	"net/netip"
	"sync"
)

// connLimit holds a route's connections to MaxConns, as a limit on what
// the supervisor spends on them (each a descriptor and a goroutine), and
// keeps anyone without a key from holding them all. A connection is
// unproven until a request of it is admitted with a valid key: when a new
// connection arrives with every slot taken, an unproven one is closed to
// make room (evicted): the oldest of the source holding the most. A client that holds connections open
// without a request (half a header sent, nothing sent) is evicted by the
// next arrivals instead of locking operators out for the header timeout,
// while an operator's connection is unproven only for the moment its first
// request takes to arrive. A proven connection (a keep-alive, a stream, a
// WebSocket) is never evicted, nor one whose request a handler is checking;
// only when every slot is one of those do new connections wait in the
// backlog, as with netutil.LimitListener.
type connLimit struct {
	net.Listener
	max int
	// evicted is told of each connection closed to make room.
	evicted func()

	mu sync.Mutex
	// room is signalled when a slot frees, a connection becomes
	// evictable, or the listener closes.
	room *sync.Cond
	open int // connections held, in every state but connReleased
	// unproven are the connections that may be evicted, by their
	// source (sourceOf), oldest first; nUnproven counts them all.
	unproven  map[netip.Prefix]*list.List
	nUnproven int
	seq       uint64 // connections accepted, for their age across sources
	closed    bool
}

func newConnLimit(ln net.Listener, max int, evicted func()) *connLimit {
	l := &connLimit{Listener: ln, max: max, evicted: evicted, unproven: map[netip.Prefix]*list.List{}}
	l.room = sync.NewCond(&l.mu)
	return l
}

// connState is where a connection stands, under connLimit.mu.
type connState int

const (
	connUnproven connState = iota // no request of it admitted, none being checked: evictable
	connChecking                  // a handler is checking a request of it
	connProven                    // a request of it was admitted: never evicted
	connReleased                  // closed, evicted or cut at Close: its slot is free
)

// routeConn is an accepted connection as http.Server holds it.
type routeConn struct {
	net.Conn
	l     *connLimit
	state connState
	src   netip.Prefix  // sourceOf its remote address
	seq   uint64        // its place in the order of arrival
	elem  *list.Element // in l.unproven[src] while state is connUnproven
}

// Accept takes the next connection once it fits, evicting an unproven
// connection (victimLocked) if every slot is taken. It waits (the connection
// left in the backlog) only while every slot is proven or being checked.
func (l *connLimit) Accept() (net.Conn, error) {
	l.mu.Lock()
	err := l.waitRoom()
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	// The room seen before Accept may be gone: the unproven connections
	// became proven or checked meanwhile.
	if err := l.waitRoom(); err != nil {
		l.mu.Unlock()
		c.Close()
		return nil, err
	}
	var victim *routeConn
	if l.open >= l.max {
		victim = l.victimLocked()
		l.releaseLocked(victim)
	}
	rc := &routeConn{Conn: c, l: l, src: sourceOf(c.RemoteAddr())}
	l.queueLocked(rc, false)
	l.open++
	l.mu.Unlock()
	if victim != nil {
		// Its server goroutine's read fails, and ends it; its own Close
		// then finds the slot released already.
		victim.Conn.Close()
		l.evicted()
	}
	return rc, nil
}

// waitRoom waits, with l.mu held, until a new connection fits: a slot is
// free or an unproven connection can be evicted. Its error is
// net.ErrClosed once the listener is closed.
func (l *connLimit) waitRoom() error {
	for !l.closed && l.open >= l.max && l.nUnproven == 0 {
		l.room.Wait()
	}
	if l.closed {
		return net.ErrClosed
	}
	return nil
}

// Close stops listening, and closes the unproven connections no handler
// has: at Shutdown they have no request to finish, and http.Server would
// wait for them until their header timeout. Proven ones are left to the
// server (it closes the idle, waits for the busy).
func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	var cut []*routeConn
	for _, q := range l.unproven {
		for e := q.Front(); e != nil; e = e.Next() {
			cut = append(cut, e.Value.(*routeConn))
		}
	}
	for _, rc := range cut {
		l.releaseLocked(rc)
	}
	l.room.Broadcast()
	l.mu.Unlock()
	err := l.Listener.Close()
	for _, rc := range cut {
		rc.Conn.Close()
	}
	return err
}

// sourceOf is who a connection counts against when one is evicted: its
// address, or for IPv6 its /64 (what one host is given).
func sourceOf(a net.Addr) netip.Prefix {
	ap := addrPortOf(a)
	bits := 32
	if !ap.Addr().Is4() {
		bits = 64
	}
	p, _ := ap.Addr().Prefix(bits)
	return p
}

// addrPortOf is a TCP connection's address; the zero one otherwise.
func addrPortOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// victimLocked is the connection to evict, with l.mu held and one
// unproven: the oldest of the source that holds the most. A client
// flooding the route from one address (or IPv6 /64) evicts its own
// first, not an operator's from another that is slow to send its
// request; from one address (a loopback route) it is the oldest of all.
func (l *connLimit) victimLocked() *routeConn {
	var most *list.List
	for _, q := range l.unproven {
		if most == nil || q.Len() > most.Len() || q.Len() == most.Len() && older(q, most) {
			most = q
		}
	}
	return most.Front().Value.(*routeConn)
}

// older says whether q's oldest connection came before r's.
func older(q, r *list.List) bool {
	return q.Front().Value.(*routeConn).seq < r.Front().Value.(*routeConn).seq
}

// queueLocked makes c evictable: last in its source's line, or first (a
// refused request's, which closes with its answer anyway).
func (l *connLimit) queueLocked(c *routeConn, first bool) {
	q := l.unproven[c.src]
	if q == nil {
		q = list.New()
		l.unproven[c.src] = q
	}
	if first {
		c.elem = q.PushFront(c)
	} else {
		l.seq++
		c.seq = l.seq
		c.elem = q.PushBack(c)
	}
	l.nUnproven++
}

// dequeueLocked takes c out of its source's line, if it is in it.
func (l *connLimit) dequeueLocked(c *routeConn) {
	if c.elem == nil {
		return
	}
	q := l.unproven[c.src]
	q.Remove(c.elem)
	if q.Len() == 0 {
		delete(l.unproven, c.src)
	}
	c.elem = nil
	l.nUnproven--
}

// releaseLocked frees c's slot, once, with l.mu held.
func (l *connLimit) releaseLocked(c *routeConn) {
	if c.state == connReleased {
		return
	}
	l.dequeueLocked(c)
	c.state = connReleased
	l.open--
	l.room.Broadcast()
}

// Close frees the connection's slot unless an eviction did already.
func (c *routeConn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// check keeps c from eviction while a handler checks its request: the
// request has been read whole, and is answered either way. It is false
// when c was evicted as the request arrived.
func (c *routeConn) check() bool { return c.hold(connChecking) }

// prove marks c as having had a request admitted with a valid key: it is
// never evicted from now on. It is false when c was evicted already.
func (c *routeConn) prove() bool { return c.hold(connProven) }

// hold takes c out of eviction's reach into state to: checking only from
// unproven (a proven connection's next request stays proven), proven from
// either. It is false when c was released already.
func (c *routeConn) hold(to connState) bool {
	if c == nil {
		return true
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.state == connReleased {
		return false
	}
	c.l.dequeueLocked(c)
	if c.state == connUnproven || to == connProven {
		c.state = to
	}
	return true
}

// checked makes c evictable again when its request was not admitted. A
// refused request's connection closes with its answer, so it goes first
// in line.
func (c *routeConn) checked() {
	if c == nil {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	switch {
	case c.state != connChecking:
	case c.l.closed:
		// Close has cut the unproven already; this one would keep
		// Shutdown waiting (a refused request's body being drained).
		c.l.releaseLocked(c)
		defer c.Conn.Close()
	default:
		c.state = connUnproven
		c.l.queueLocked(c, true)
		c.l.room.Broadcast()
	}
}

// cutReason is the reason of a request whose connection was released
// before it could be admitted: the route stopping, or "" (an eviction).
func (c *routeConn) cutReason() string {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.l.closed {
		return ReasonShuttingDown
	}
	return ""
}

type connKey struct{}

// connContext is http.Server's ConnContext: a request's handler finds its
// connection (connOf).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if rc, ok := c.(*routeConn); ok {
		return context.WithValue(ctx, connKey{}, rc)
	}
	return ctx
}

// connOf is the connection a request came on; nil (never evicted, nothing
// to prove) for one not accepted by a connLimit.
func connOf(ctx context.Context) *routeConn {
	rc, _ := ctx.Value(connKey{}).(*routeConn)
	return rc
}

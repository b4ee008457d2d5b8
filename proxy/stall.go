package proxy

import (
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// stallConn is a client connection whose writes must make progress (and
// whose requests' framing is followed: frameTracker): a
// client that accepts none of what the proxy writes it (it stopped reading
// a response, and the socket buffers are full) for timeout is cut, where
// it would otherwise pin its connection, and the upstream's, for as long
// as it likes (--idle-timeout applies between requests only). A client
// reading slowly but steadily is never cut: the wait restarts whenever a
// write moved any byte. The limit is on progress, as nginx's send_timeout,
// not on a whole response, which may be a stream of any length.
//
// Every plain and inspected connection is wrapped; an opaque tunnel
// relays the bare connection (rawConn) and is bounded by
// --tunnel-idle-timeout instead.
type stallConn struct {
	net.Conn
	timeout time.Duration
	// own is the write deadline a caller set (unix ns, 0 for none),
	// which bounds a write as given: a lingering close keeps its bound.
	own atomic.Int64
	// armed is the deadline armWrite set (unix ns), 0 when it must set
	// one anew.
	armed   atomic.Int64
	stalled atomic.Bool
	// frames follows the requests read from the connection, whose
	// framing http.Server does not let the handler see.
	frames *frameTracker
}

func (c *stallConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.frames.feed(b[:n])
	return n, err
}

func (c *stallConn) Write(b []byte) (int, error) {
	written := 0
	for {
		c.armWrite()
		n, err := c.Conn.Write(b[written:])
		written += n
		if err == nil || !isTimeout(err) {
			return written, err
		}
		if own := c.own.Load(); own != 0 && time.Now().UnixNano() >= own {
			return written, err // the caller's deadline, not a stall
		}
		if n == 0 {
			c.stalled.Store(true)
			return written, err
		}
		// Some of it went: the client is reading. Wait for the rest.
		c.armed.Store(0)
	}
}

// armWrite sets the deadline a write's progress is measured by: timeout
// from now, or the caller's own deadline if that is sooner. Setting a
// deadline updates a runtime timer (~4% of a plain request's CPU when
// every write did): one set with an eighth of timeout to spare is kept
// until less than timeout remains, so a client that takes nothing is cut
// after between timeout and 9/8 of it.
func (c *stallConn) armWrite() {
	now := time.Now().UnixNano()
	if own := c.own.Load(); own != 0 {
		c.armed.Store(0)
		c.Conn.SetWriteDeadline(time.Unix(0, min(now+int64(c.timeout), own)))
		return
	}
	if at := c.armed.Load(); at != 0 && at-now >= int64(c.timeout) {
		return
	}
	d := now + int64(c.timeout) + int64(c.timeout)/8
	c.armed.Store(d)
	c.Conn.SetWriteDeadline(time.Unix(0, d))
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.own.Store(unixNano(t))
	c.armed.Store(0)
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallConn) SetDeadline(t time.Time) error {
	c.own.Store(unixNano(t))
	c.armed.Store(0)
	return c.Conn.SetDeadline(t)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// CloseWrite lets linger shut the socket's write side.
func (c *stallConn) CloseWrite() error { return closeWrite(c.Conn) }

// SyscallConn lets the idle watcher and reset reach the socket.
func (c *stallConn) SyscallConn() (syscall.RawConn, error) { return syscallConn(c.Conn) }

// rawConn is the socket under c, for a relay that splices.
func rawConn(c net.Conn) net.Conn {
	if s, ok := c.(*stallConn); ok {
		return s.Conn
	}
	return c
}

// noteStalled puts in dc's audit detail that the client was cut for
// accepting nothing, if it was.
func (p *Proxy) noteStalled(dc *decision, cc *clientConn) {
	if cc != nil && cc.conn != nil && cc.conn.stalled.Load() {
		dc.detail = fmt.Sprintf("closed by the proxy: the client accepted none of the response for %s (--write-timeout)", p.cfg.Limits.WriteTimeout)
	}
}

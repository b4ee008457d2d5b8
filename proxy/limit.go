package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// limitListener enforces the sandbox's connection limit before http.Server
// sees a connection: one beyond the limit is answered here and never
// served. The connections it passes on are wrapped twice: a stallConn,
// which cuts clients that stop reading and follows their requests'
// framing, inside a servedConn, which audits the server's own refusals. A
// connection taken over from the server is unwrapped again (bareConn, then
// rawConn for an opaque tunnel), so its relay reads the socket itself.
type limitListener struct {
	net.Listener
	p           *Proxy
	st          *sandboxState
	transparent bool // ServeTransparent's
}

// Accept is accept's connection as http.Server holds it.
func (l *limitListener) Accept() (net.Conn, error) {
	cc, err := l.accept()
	if err != nil {
		return nil, err
	}
	return &servedConn{Conn: cc.conn, p: l.p, cc: cc}, nil
}

// accept takes the next connection within the sandbox's limit; one over
// it is refused on its own goroutine.
func (l *limitListener) accept() (*clientConn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := l.st.active.Add(1)
		if n <= int64(l.p.cfg.Limits.MaxConns) {
			// A transparent connection's requests, if any, are read by
			// serveRequests, which follows their framing itself.
			frames := noFrames
			if !l.transparent {
				frames = &frameTracker{maxHeader: l.p.cfg.Limits.MaxHeaderBytes + 4096}
			}
			cc := newClientConn(l.st, &stallConn{Conn: c, timeout: l.p.cfg.Limits.WriteTimeout, frames: frames})
			cc.transparent = l.transparent
			return cc, nil
		}
		l.st.active.Add(-1)
		go l.p.refuseOverLimit(c, l.st, n-1, l.transparent)
	}
}

// noFrames follows nothing: stopped from the start and never written, so
// every transparent connection shares it.
var noFrames = &frameTracker{state: stopped}

// A refusal in flight holds a descriptor for up to refuseLinger; beyond
// maxRefusing of them for one sandbox (sandboxState.refusing) its flood is
// closed unanswered, so that being refused cannot exhaust descriptors
// either, nor one sandbox's flood silence another's answers.
const (
	maxRefusing  = 64
	refuseLinger = 500 * time.Millisecond
)

// refuseOverLimit answers a connection accepted beyond the sandbox's limit
// with a 503 and the usual JSON body, and writes its audit line. Its owner
// is not looked up: the limit guards the proxy's resources, and a lookup
// per refused connection would spend them. The close lingers, as
// http.Server's does, so the request the client sent meanwhile does not
// turn the close into a reset that destroys the answer unread.
// A transparent connection is reset instead: its client speaks whatever
// protocol it chose (TLS, SSH), in which an HTTP answer is garbage.
func (p *Proxy) refuseOverLimit(c net.Conn, st *sandboxState, held int64, transparent bool) {
	defer c.Close()
	dc := listenerDenial(st, policies.Request{Phase: policies.PhaseConnect}, policies.ReasonConnectionLimit, fmt.Sprintf("%d connections through the proxy, its limit", held))
	dc.transparent = transparent
	if st.refusing.Add(1) > maxRefusing {
		// A flood: closed at once, unanswered, and summed up in one
		// audit line per floodInterval rather than one line each.
		st.refusing.Add(-1)
		p.cfg.Metrics.countDecision(st.ID, "deny", string(policies.ReasonConnectionLimit))
		if st.flooded.Add(1) == 1 {
			time.AfterFunc(floodInterval, func() { p.recordFlood(st) })
		}
		return
	}
	defer st.refusing.Add(-1)
	if transparent {
		p.record(dc, 0, 0, 0)
		reset(c)
		return
	}
	defer p.record(dc, dc.status(), 0, 0)
	resp := dc.denialResponse(nil)
	resp.Close = true
	resp.Header.Set("Retry-After", "1")
	c.SetDeadline(time.Now().Add(refuseLinger))
	if resp.Write(c) != nil {
		return
	}
	linger(c, 64<<10)
}

// floodInterval is how often a flood's connections, closed unanswered, are
// summed up in one audit line: the first of them starts an interval, at
// whose end (or when the listener stops) the line is written with the
// count.
const floodInterval = time.Second

// recordFlood writes the audit line of the connections closed unanswered
// since the last one, if there were any. Their decisions are counted in the
// metrics one by one as they happen.
func (p *Proxy) recordFlood(st *sandboxState) {
	n := st.flooded.Swap(0)
	if n == 0 {
		return
	}
	dc := listenerDenial(st, policies.Request{Phase: policies.PhaseConnect}, policies.ReasonConnectionLimit,
		fmt.Sprintf("%d connections over the limit closed unanswered within %s: %d refusals were being answered already", n, floodInterval, maxRefusing))
	dc.count = n
	p.writeLine(dc, AuditMessage, 0, 0, 0)
}

// linger readies a connection for its close after the proxy's last answer
// on it. A close with the client's bytes unread in the socket sends a
// reset, which can destroy the answer before the client has read it (a
// refused upload still being sent), so the write side is shut first, which
// tells the client the answer is whole, and the close waits for the client
// to close too, for at most refuseLinger, as http.Server does. Meanwhile up
// to max bytes of what it still sends are read and dropped, which lets it
// see the close sooner; past that it is left to read the answer unhurried.
func linger(c net.Conn, max int64) {
	closeWrite(c)
	deadline := time.Now().Add(refuseLinger)
	c.SetReadDeadline(deadline)
	if n, _ := io.Copy(io.Discard, io.LimitReader(c, max)); n == max {
		time.Sleep(time.Until(deadline))
	}
}

// refuseConn answers dc's denial (of r, when there is one) on a
// connection taken over from the server, records it, and lingers so that
// the client reads it. The answer says the connection closes: the caller
// closes it next.
func (p *Proxy) refuseConn(c net.Conn, dc *decision, r *http.Request) {
	resp := dc.denialResponse(r)
	resp.Close = true
	resp.Write(c)
	p.record(dc, dc.status(), 0, 0)
	linger(c, maxLinger)
}

// maxLinger is the most linger drops of a client's unread bytes after a
// refusal in a connection it may go on sending on.
const maxLinger = 1 << 20

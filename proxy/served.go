package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// servedConn is an accepted connection as http.Server holds it. The server
// answers some requests itself, before any handler sees them: a malformed
// request line or header, a header over --max-header-bytes (431), a bad or
// missing Host, a transfer coding it does not know (501), an Expect it
// does not (417). Such an answer is a refusal like any other, so servedConn
// audits it as it goes out and gives it the reason every denial carries: a
// write while no handler has the connection's current request is the
// server's own. A taken-over connection is used bare (bareConn), so a
// tunnel relays between the sockets themselves (proxy/relay).
type servedConn struct {
	net.Conn
	p  *Proxy
	cc *clientConn
	// begun: bytes of a request have arrived that no handler has yet.
	begun atomic.Bool
}

// Read notes a request begun while no handler has it, so that a header the
// server gives up on (--read-header-timeout: the server closes the
// connection without a word) is audited as a refusal too. A keep-alive
// connection that times out with nothing begun is only idle.
func (c *servedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.cc.handled.Load() {
		c.begun.Store(true)
	}
	if err != nil && isTimeout(err) && c.begun.Load() && c.cc.handled.CompareAndSwap(false, true) {
		dc := c.p.refused(c.cc, policies.Request{Phase: policies.PhaseRequest}, policies.ReasonInvalidRequest, headerTimeoutDetail(c.p.cfg.Limits.ReadHeaderTimeout))
		c.p.record(dc, 0, 0, 0)
	}
	return n, err
}

// headerTimeoutDetail says why a begun request header was cut off.
func headerTimeoutDetail(d time.Duration) string {
	return fmt.Sprintf("request header not complete within %s (--read-header-timeout): connection closed", d)
}

// Write audits a refusal of the server's own, once per request, and
// answers it as any denial (serverRefusal) when b holds it whole.
func (c *servedConn) Write(b []byte) (int, error) {
	if !c.cc.handled.CompareAndSwap(false, true) {
		return c.Conn.Write(b)
	}
	resp := c.p.serverRefusal(c.cc, b)
	if resp == nil {
		return c.Conn.Write(b)
	}
	if err := resp.Write(c.Conn); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseWrite lets the server half-close the connection after its last
// answer, as it does a bare TCP connection: the client sees the end at
// once, not after the server's wait before the close.
func (c *servedConn) CloseWrite() error { return closeWrite(c.Conn) }

// ReadFrom keeps the server's copy of a response body into the socket as it
// is on a bare TCP connection (its ReadFrom). Only a handler's answers go
// this way, so there is nothing here to audit.
func (c *servedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// serverStateHook, as http.Server's ConnState, marks a connection
// unhandled again once a request's answer is written whole: the server
// reports the connection idle then, before it reads the next request, even
// one already buffered (pipelined). A new connection starts unhandled.
func serverStateHook(c net.Conn, s http.ConnState) {
	if s == http.StateIdle {
		if sc, ok := c.(*servedConn); ok {
			sc.begun.Store(false)
			sc.cc.handled.Store(false)
		}
	}
}

// bareConn is the accepted connection itself, for a connection taken over
// from the server.
func bareConn(c net.Conn) net.Conn {
	if sc, ok := c.(*servedConn); ok {
		return sc.Conn
	}
	return c
}

// serverRefusal audits the answer the server wrote in b (its status
// line, which names no value the client sent) as an invalid_request
// refusal, attributed like any other. When b is that answer whole, after
// which the server closes the connection (as net/http writes its own
// refusals: in one write), it returns the proxy's answer in its stead:
// the same status, its line carrying the reason and hint
// (denialResponse), and the JSON Denial for body, so that the client
// shows why; otherwise nil, and the server's answer goes out as it is.
func (p *Proxy) serverRefusal(cc *clientConn, b []byte) *http.Response {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	status := 0
	if len(line) >= 12 && bytes.HasPrefix(line, []byte("HTTP/1.")) {
		status, _ = strconv.Atoi(string(line[9:12]))
	}
	if status < 400 {
		return nil // not a refusal
	}
	detail := "refused by the proxy's HTTP server before the request was read: " + string(line[9:])
	if status == http.StatusRequestHeaderFieldsTooLarge {
		detail = fmt.Sprintf("request header larger than %d bytes (--max-header-bytes)", p.cfg.Limits.MaxHeaderBytes)
	}
	dc := p.refused(cc, policies.Request{Phase: policies.PhaseRequest}, policies.ReasonInvalidRequest, detail)
	p.record(dc, status, 0, 0)
	if !wholeFinal(b) {
		return nil
	}
	resp := dc.denialResponse(nil)
	resp.Status = strconv.Itoa(status) + strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode))
	resp.StatusCode = status
	resp.Close = true
	return resp
}

// wholeFinal reports whether b is one whole response after which the
// connection closes: nothing of it is left for a later write.
func wholeFinal(b []byte) bool {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.Close
}

package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/policies"
)

const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// dialChecked dials exactly the addresses the guard checked for dc. A
// failure turns dc into a denial (upstream_error) for the caller to answer.
func (p *Proxy) dialChecked(dc *decision) (net.Conn, bool) {
	upstream, err := p.cfg.Guard.Dial(context.Background(), dc.addrs, dc.in.Request.Port)
	if err != nil {
		dc.deny(policies.ReasonUpstreamError, err.Error())
		return nil, false
	}
	return upstream, true
}

// tunnel relays an allowed, uninspected connection to its upstream, dialled
// to exactly the addresses the guard checked (dialChecked), early (what
// the client sent before the relay began) first.
func (p *Proxy) tunnel(client, upstream net.Conn, early []byte, dc *decision) {
	if len(early) > 0 {
		if _, err := upstream.Write(early); err != nil {
			dc.detail = "upstream write: " + err.Error()
			p.record(dc, http.StatusOK, 0, 0)
			return
		}
	}
	p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, 1)
	defer p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, -1)
	stopIdle := watchIdle(p.cfg.Limits.TunnelIdleTimeout, client, upstream)
	up, down := relay(client, upstream)
	if stopIdle() {
		dc.detail = p.idleClosed()
	}
	p.record(dc, http.StatusOK, int64(len(early))+up, down)
}

// idleClosed is the audit detail of a tunnel the idle watcher closed.
func (p *Proxy) idleClosed() string {
	return fmt.Sprintf("closed by the proxy after %s without data either way (--tunnel-idle-timeout)", p.cfg.Limits.TunnelIdleTimeout)
}

// relay copies both ways until both directions end, passing a half-close
// on; an error in either direction tears both down. The caller closes both
// connections afterwards.
func relay(client, upstream net.Conn) (up, down int64) {
	var ended atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		down, err = copyConn(client, upstream)
		finish(client, upstream, err, &ended)
	}()
	var err error
	up, err = copyConn(upstream, client)
	finish(upstream, client, err, &ended)
	wg.Wait()
	return up, down
}

// copyConn copies src to dst until src's EOF: through a pooled buffer
// between TCP connections (relayCopy), else through io.Copy's.
func copyConn(dst, src net.Conn) (int64, error) {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if ok1 && ok2 {
		return relayCopy(d, s)
	}
	return io.Copy(dst, src)
}

// finish ends one direction: an error closes both connections so the other
// direction ends too; a clean EOF becomes a half-close of dst, unless the
// other direction has already ended, when the caller's close says as much.
// A connection closed under the copy (Shutdown's grace ran out, the idle
// watcher) is an error too: taken for an EOF, it would leave the other
// direction waiting on an upstream that may never speak again.
func finish(dst, src net.Conn, err error, ended *atomic.Int32) {
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	if ended.Add(1) == 2 {
		return
	}
	if closeWrite(dst) != nil {
		dst.Close()
	}
}

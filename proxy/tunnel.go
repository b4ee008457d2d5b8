package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/airlock-sandbox/airlock/policies"
)

const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// tunnel relays an allowed, uninspected CONNECT to exactly the addresses the
// guard checked. The relay is io.Copy between TCP connections, which Linux
// turns into splice(2): the bytes never enter user space.
func (p *Proxy) tunnel(client net.Conn, dc *decision) {
	upstream, err := p.cfg.Guard.Dial(context.Background(), dc.addrs, dc.in.Request.Port)
	if err != nil {
		dc.deny(policies.ReasonUpstreamError, err.Error())
		dc.denialResponse(nil).Write(client)
		p.record(dc, dc.status(), 0, 0)
		return
	}
	defer upstream.Close()
	if _, err := io.WriteString(client, established); err != nil {
		p.record(dc, http.StatusOK, 0, 0)
		return
	}
	p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, 1)
	defer p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, -1)
	done := make(chan struct{})
	go watchIdle(client, upstream, p.cfg.Limits.TunnelIdleTimeout, done)
	up, down := relay(client, upstream)
	close(done)
	p.record(dc, http.StatusOK, up, down)
}

// relay copies both ways until both directions end, passing a half-close
// on; an error in either direction tears both down.
func relay(client, upstream net.Conn) (up, down int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		down, err = io.Copy(client, upstream)
		finish(client, upstream, err)
	}()
	var err error
	up, err = io.Copy(upstream, client)
	finish(upstream, client, err)
	wg.Wait()
	return up, down
}

// finish ends one direction: a clean EOF becomes a half-close of dst, an
// error closes both connections so the other direction ends too.
func finish(dst, src net.Conn, err error) {
	if err != nil && !errors.Is(err, net.ErrClosed) {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		dst.Close()
	}
}

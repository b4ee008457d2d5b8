package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/egress"
)

const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// dialChecked dials exactly the addresses the guard checked for dc. A
// failure turns dc into a denial (upstreamFailure) for the caller to
// answer.
func (p *Proxy) dialChecked(dc *decision) (net.Conn, bool) {
	upstream, err := p.cfg.Guard.Dial(p.forced, dc.addrs, dc.in.Request.Port)
	if err != nil {
		dc.deny(upstreamFailure(err), err.Error())
		return nil, false
	}
	return upstream, true
}

// upstreamFailure is the reason of a failed upstream: ssrf when the guard
// refused what the dial reached (the host itself), upstream_error
// otherwise.
func upstreamFailure(err error) policies.Reason {
	if errors.Is(err, egress.ErrBlocked) {
		return policies.ReasonSSRF
	}
	return policies.ReasonUpstreamError
}

// tunnel relays an allowed, uninspected connection to its upstream, dialled
// to exactly the addresses the guard checked (dialChecked), what the
// client opened it with (first: bytes it sent before the relay began, and
// what the upstream had sent it meanwhile) counted and sent on first. A
// TLS one is relayed once its handshake's clear text is over (helloRetry),
// or refused and reset.
func (p *Proxy) tunnel(client, upstream net.Conn, first opening, dc *decision) {
	sentUp, sentDown := int64(len(first.early)), first.greeted
	switch {
	case first.proto == speaksTLS:
		up, down, ok := p.helloRetry(client, upstream, first, dc)
		if sentUp, sentDown = up, sentDown+down; !ok {
			status := http.StatusOK
			if !dc.d.Allow {
				status = 0 // nothing answered: the client is mid-handshake
			}
			p.record(dc, status, sentUp, sentDown)
			reset(client)
			return
		}
	case len(first.early) > 0:
		if _, err := upstream.Write(first.early); err != nil {
			dc.detail = "upstream write: " + err.Error()
			p.record(dc, http.StatusOK, 0, first.greeted)
			return
		}
	}
	p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, 1)
	defer p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, -1)
	var up, down int64
	var idle bool
	c, ok1 := client.(*net.TCPConn)
	u, ok2 := upstream.(*net.TCPConn)
	if ok1 && ok2 {
		var err error
		if up, down, idle, err = p.relayOnLoop(c, u); err != nil {
			dc.detail = err.Error()
		}
	} else {
		stopIdle := watchIdle(p.cfg.Limits.TunnelIdleTimeout, client, upstream)
		var err error
		up, down, err = copyBoth(client, upstream)
		if idle = stopIdle(); err != nil {
			dc.detail = err.Error() // as the relay loop's: a reset, a closed end
		}
	}
	if idle {
		dc.detail = p.idleClosed()
	}
	p.record(dc, http.StatusOK, sentUp+up, sentDown+down)
}

// relayOnLoop hands a tunnel's two sockets to an event loop (proxy/relay)
// and waits for the pair to end: both sides done, a side's error, no data
// either way for --tunnel-idle-timeout, or Shutdown's grace run out. err
// is what ended it otherwise than both sides done or the idle limit (a
// reset, Shutdown's grace), or a failure to hand them over (the sockets
// are closed then): the close line's detail.
func (p *Proxy) relayOnLoop(client, upstream *net.TCPConn) (up, down int64, idleClosed bool, err error) {
	pair, err := p.relays.Relay(client, upstream)
	if err != nil {
		return 0, 0, false, err
	}
	idle := p.cfg.Limits.TunnelIdleTimeout
	check := time.NewTimer(idle / 4)
	defer check.Stop()
	forced := p.forced.Done()
	for {
		select {
		case <-pair.Done():
			r := pair.Result()
			if idleClosed {
				r.Err = nil // the detail says so (idleClosed)
			}
			return r.AToB, r.BToA, idleClosed, r.Err
		case <-check.C:
			if pair.IdleFor() >= idle {
				idleClosed = true
				pair.Abort(errIdleTunnel)
			} else {
				check.Reset(idle / 4)
			}
		case <-forced:
			pair.Abort(errForced)
			forced = nil // once: the pair ends through the loop
		}
	}
}

var (
	errIdleTunnel = errors.New("idle")
	errForced     = errors.New("closed by the proxy's shutdown")
)

// idleClosed is the audit detail of a tunnel the idle watcher closed.
func (p *Proxy) idleClosed() string {
	return fmt.Sprintf("closed by the proxy after %s without data either way (--tunnel-idle-timeout)", p.cfg.Limits.TunnelIdleTimeout)
}

// copyBoth copies both ways until both directions end, passing a half-close
// on; an error in either direction tears both down, and the first is
// returned (what ended the tunnel, for its close line). The caller closes
// both connections afterwards. It serves a tunnel whose ends are not both
// TCP sockets (a listener of another kind); the relay loops serve the rest.
func copyBoth(client, upstream net.Conn) (up, down int64, err error) {
	var ended atomic.Int32
	var first atomic.Pointer[error]
	fail := func(dir string, err error) {
		if err != nil {
			err = fmt.Errorf("%s: %w", dir, err)
			first.CompareAndSwap(nil, &err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		down, err = io.Copy(client, upstream)
		fail("relay down", err)
		finish(client, upstream, err, &ended)
	}()
	up, err = io.Copy(upstream, client)
	fail("relay up", err)
	finish(upstream, client, err, &ended)
	wg.Wait()
	if e := first.Load(); e != nil {
		return up, down, *e
	}
	return up, down, nil
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

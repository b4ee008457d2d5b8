package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/egress"
)

// serveConnect decides a CONNECT and takes the client connection over for
// whatever follows: a denial, an opaque tunnel or an inspected tunnel.
// goproxy never sees a CONNECT, so nothing reaches its own dialer or MITM.
// A client may send its first tunnel bytes (a TLS ClientHello) with the
// CONNECT, before the answer: the server read them with the request, and
// they are the tunnel's first.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	cc := connFrom(ctx)
	var dc *decision
	if req, why := connectTarget(r.RequestURI); why != "" {
		dc = p.refused(cc, req, policies.ReasonInvalidRequest, why)
	} else {
		dc = p.decide(ctx, cc, req)
	}
	if dc.d.Allow {
		p.resolve(ctx, dc)
	}
	// On record before the tunnel is dialled, or inspected; refused
	// (audit_unavailable) when it cannot be.
	p.admit(dc)
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		dc.deny(policies.ReasonInvalidRequest, "cannot take over the client connection: "+err.Error())
		p.record(dc, dc.status(), 0, 0)
		return
	}
	client = bareConn(client)
	t, release := p.track(client)
	defer release()
	defer cc.sb.active.Add(-1) // hijacked: the slot is ours to release
	if t == nil {
		dc.detail = shuttingDown
		p.record(dc, 0, 0, 0)
		return
	}
	defer client.Close()
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	switch {
	case !dc.d.Allow:
		p.refuseConn(client, dc, r) // the client may have sent its first tunnel bytes
	case dc.d.Inspect:
		if !p.established(client, dc) {
			return
		}
		p.inspect(cc, withEarly(client, early), t, dc)
	default:
		upstream, ok := p.dialChecked(dc)
		if !ok {
			p.refuseConn(client, dc, nil)
			return
		}
		defer upstream.Close()
		if !p.established(client, dc) {
			return
		}
		p.opaque(cc, client, upstream, t, early, dc)
	}
}

// opaque serves an allowed, uninspected CONNECT once it is established:
// what the client opens the tunnel with is looked at first, as on the
// transparent path. A TLS server name must name the CONNECT's host (an IP
// literal's: any), else the tunnel would carry a connection to another
// host on the same address, decided as this one; plain HTTP is read as
// requests, each decided and its Host pinned, as a plain request to the
// proxy is; anything else is relayed. A client that says nothing at once
// (a server-first protocol) gets its upstream's greeting meanwhile, and
// is looked at when it speaks.
func (p *Proxy) opaque(cc *clientConn, client, upstream net.Conn, t *tracked, early []byte, dc *decision) {
	var first opening
	var err error
	if len(early) > 0 {
		first, err = p.peek(client, early)
	} else {
		// The upstream is dialled: a server-first protocol's greeting
		// is relayed at once while the client says nothing.
		var end error
		if first, end, err = p.awaitClient(client, upstream); end != nil {
			p.endUnrelayed(client, dc, end, first)
			return
		}
	}
	// To an address too: a name sent to one is decided by no rule of
	// that name (a deny of it included), as on the transparent path.
	p.serveOpened(cc, client, rawConn(client), upstream, t, first, err, dc.in.Request.Host, dc)
}

// established answers an allowed CONNECT, once its upstream (if opaque)
// is dialled; a client gone meanwhile ends the decision on record.
func (p *Proxy) established(client net.Conn, dc *decision) bool {
	if _, err := io.WriteString(client, established); err != nil {
		dc.detail = "client write: " + err.Error()
		p.record(dc, 0, 0, 0)
		return false
	}
	return true
}

// withEarly is c reading early, bytes the client sent before the proxy
// read from c itself, first.
func withEarly(c net.Conn, early []byte) net.Conn {
	if len(early) == 0 {
		return c
	}
	return &earlyConn{Conn: c, early: early}
}

// connectTarget reads a CONNECT's request-target as RFC 9110 spells it,
// host ":" port with a port of digits only, or says why it cannot. It reads
// the target as sent: net/http's URL would take "user@host:443" for host,
// a spelling no client sends.
func connectTarget(target string) (req policies.Request, why string) {
	req = policies.Request{Phase: policies.PhaseConnect, Host: target}
	host, portStr, err := net.SplitHostPort(target)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil || strings.Trim(portStr, "0123456789") != "" {
		return req, "CONNECT target " + strconv.Quote(target) + " is not host:port"
	}
	req.Host, req.Port = host, port
	return req, ""
}

// earlyConn reads the bytes that came with the CONNECT before the socket's.
// Only the inspection loop, which reads through TLS anyway, sees it: an
// opaque tunnel writes them ahead and keeps the bare connection, whose
// relay reads the socket itself.
// As any net.Conn, it may be read from several goroutines at once.
type earlyConn struct {
	net.Conn
	mu    sync.Mutex
	early []byte
}

func (c *earlyConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// CloseWrite lets linger shut the socket's write side.
func (c *earlyConn) CloseWrite() error { return closeWrite(c.Conn) }

// SyscallConn lets the idle watcher read the socket's TCP_INFO.
func (c *earlyConn) SyscallConn() (syscall.RawConn, error) { return syscallConn(c.Conn) }

// resolve runs the SSRF guard for an allowed decision: every address the
// name resolves to is checked, and they become dc.addrs, the only ones
// dialled for it. A refusal turns the decision into a denial.
func (p *Proxy) resolve(ctx context.Context, dc *decision) {
	r := &dc.in.Request
	addrs, err := p.cfg.Guard.Lookup(ctx, r.Host, r.Port)
	switch {
	case errors.Is(err, egress.ErrBlocked):
		dc.deny(policies.ReasonSSRF, err.Error())
		return
	case err != nil:
		dc.deny(policies.ReasonUpstreamError, err.Error())
		return
	}
	dc.addrs = addrs
}

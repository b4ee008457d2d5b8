package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/elazarl/goproxy"
)

// handleConnect decides a CONNECT and hijacks the client connection for
// whatever follows: a denial, an opaque tunnel or an inspected tunnel. No
// CONNECT is ever handed to goproxy's own dialer or MITM.
func (p *Proxy) handleConnect(target string, gctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	ctx := gctx.Req.Context()
	cc := connFrom(ctx)
	host, portStr, err := net.SplitHostPort(target)
	port, perr := strconv.Atoi(portStr)
	var dc *decision
	if err != nil || perr != nil {
		dc = p.refused(cc, policies.Request{Phase: policies.PhaseConnect, Host: target}, policies.ReasonInvalidRequest, "CONNECT target "+strconv.Quote(target)+" is not host:port")
	} else {
		dc = p.decide(ctx, cc, policies.Request{Phase: policies.PhaseConnect, Scheme: "https", Host: host, Port: port})
	}
	if dc.d.Allow {
		p.resolve(ctx, dc)
	}
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
		defer p.track(client)()
		defer cc.sb.active.Add(-1)
		defer client.Close()
		switch {
		case !dc.d.Allow:
			dc.denialResponse(req).Write(client)
			p.record(dc, dc.status(), 0, 0)
		case dc.d.Inspect:
			p.inspect(cc, client, dc)
		default:
			p.tunnel(client, dc)
		}
	}}, target
}

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
	for _, a := range addrs {
		dc.in.Destination.IPs = append(dc.in.Destination.IPs, a.String())
	}
}

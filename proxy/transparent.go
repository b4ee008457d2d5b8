package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// NameMap maps the synthetic addresses a sandbox's DNS answered with back
// to their names. synthetic=false: a is not a synthetic address (the
// connection is decided as the literal address); synthetic=true with name
// "": it was, but its name is forgotten (the connection is denied,
// name_forgotten).
type NameMap interface {
	Name(a netip.Addr) (name string, synthetic bool)
}

// ServeTransparent accepts redirected connections on ln for the sandbox until
// Shutdown, as Serve does the explicit proxy's: the same limits
// (limitListener), identity, policy, SSRF guard, audit and metrics. Each
// connection is decided as a CONNECT to the destination its client asked
// for (the redirect's original destination, mapped back to its name by
// sb.Names), after a look at its first bytes: a TLS ClientHello's server
// name and an HTTP/1 request's Host must name that same host.
func (e *Egress) ServeTransparent(ln net.Listener) error {
	p, sb := e.p, e.st.Sandbox
	st := e.st // shared with the sandbox's other listeners
	if err := p.checkOrigin(st); err != nil {
		return fmt.Errorf("proxy: sandbox %s: transparent listener: %w", sb.ID, err)
	}
	// Shutdown stops listeners through their http.Server. This one serves
	// nothing itself: its shutdown closes ln, which ends the accept loop,
	// and Shutdown drains the connections, each tracked (p.track), as it
	// drains hijacked ones.
	srv := &http.Server{}
	srv.RegisterOnShutdown(func() { ln.Close() })
	if err := p.register(srv); err != nil {
		return err
	}
	p.log.Info("proxy serving transparently", "sandbox", sb.ID, "kind", sb.Kind, "preset", sb.Preset, "pod", sb.Route != nil, "listen", ln.Addr().String())
	defer p.recordFlood(st) // what the last interval counted
	accept := &limitListener{Listener: ln, p: p, st: st, transparent: true}
	var backoff time.Duration
	for {
		cc, err := accept.accept()
		if err != nil {
			if p.isClosing() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Temporary() { //nolint:staticcheck // as http.Server: EMFILE and the like pass
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn("transparent listener: accept failed, retrying", "sandbox", sb.ID, "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("proxy: sandbox %s: transparent listener: %w", sb.ID, err)
		}
		backoff = 0
		go p.serveTransparent(cc)
	}
}

// isClosing reports whether Shutdown has begun.
func (p *Proxy) isClosing() bool { return p.closing.Load() }

// redirected is the source and destination a redirected connection's
// client sent it from and to, which conntrack remembers (st.conntrack) by
// the accepted socket's own addresses. The source is not always the remote
// address the listener sees: the redirect makes every connection's reply
// tuple (listener → client address and port), and a client that connects
// from one port to two destinations gets, for the second, a source port
// the NAT remapped. sock_diag knows the client socket only by its own
// tuple. A connection that reached the listener without a redirect (a
// client that dialled the listener's own address) has none, and is
// refused: it would be decided as a connection to the proxy itself.
//
// One ctnetlink GET gives both, where SO_ORIGINAL_DST gives only the
// destination: asking sock_diag first with the remote the listener sees
// and conntrack only when that fails would save the GET (some 55µs) on
// most connections, but trusts a socket sock_diag finds at the remapped
// port, which may be another client's.
func redirected(st *sandboxState, local, remote netip.AddrPort) (src, dst netip.AddrPort, err error) {
	src, dst, err = st.conntrack.Original(local, remote)
	if err != nil {
		return netip.AddrPort{}, netip.AddrPort{}, err
	}
	if dst == local {
		return netip.AddrPort{}, netip.AddrPort{}, fmt.Errorf("its destination %s is the transparent listener itself, not a redirected one", dst)
	}
	return src, dst, nil
}

// checkConntrack refuses the transparent listeners of a sandbox whose
// conntrack cannot be asked (no CAP_NET_ADMIN in its network namespace, no
// ctnetlink): every connection's tuple comes from it (redirected), and
// every one would be refused.
func checkConntrack(st *sandboxState) error { return st.conntrack.Check() }

// serveTransparent decides one redirected connection and serves what the
// decision says: a denial the client can read where its protocol allows
// one, an opaque tunnel, an inspected TLS tunnel, or plain HTTP requests
// decided one by one.
func (p *Proxy) serveTransparent(cc *clientConn) {
	// A fault in one connection's serving ends that connection, as
	// net/http's server ends a handler's (explicit proxy connections are
	// served in its handlers), not the proxy every sandbox's egress goes
	// through; the connection is closed by the deferred calls below.
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("transparent connection: panic serving it", "sandbox", cc.sb.ID, "remote", cc.remote.String(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			p.endOpen(cc, r)
		}
	}()
	defer cc.sb.active.Add(-1) // limitListener took the slot
	client := cc.conn          // stallConn: a client that stops reading is cut
	raw := rawConn(client)     // the socket, which an opaque tunnel relays
	t, release := p.track(raw)
	defer release()
	if t == nil {
		return // the proxy is shutting down: closed before a byte was read
	}
	defer raw.Close()
	ctx := context.Background()

	src, orig, err := p.origin(cc.sb, cc.local, cc.remote) // the accepted socket's own
	if err != nil {
		// Attributed where it can be (a client that dialled the listener
		// itself is known by its own socket); a redirected one whose
		// tuple conntrack could not give is known by none, and the
		// reason stays this one, not identity_unknown.
		dc, attributed := p.begin(cc, policies.Request{Phase: policies.PhaseConnect})
		why := "not a redirected connection, or its original destination is unknown: " + err.Error()
		if !attributed {
			why += " (nor is its owner: " + dc.detail + ")"
		}
		dc.d, dc.detail = policies.Decision{Reason: policies.ReasonInvalidRequest, Preset: dc.in.Sandbox.Preset}, why
		p.record(dc, 0, 0, 0)
		reset(raw)
		return
	}
	// sock_diag knows the client socket by its own 4-tuple (redirected),
	// not by the listener's address nor a remapped source port.
	cc.remote, cc.local = src, orig
	target, forgotten := transparentTarget(cc.sb.Names, orig)

	first, err := p.peek(client, nil)
	if err != nil {
		p.record(p.refused(cc, target, policies.ReasonInvalidRequest, err.Error()), 0, 0, 0)
		reset(raw)
		return
	}
	var dc *decision
	switch {
	case forgotten:
		dc = p.refused(cc, target, policies.ReasonNameForgotten, "no name is remembered for "+orig.Addr().String())
	case first.serverName != "" && !sameName(first.serverName, target.Host):
		dc = p.refused(cc, target, policies.ReasonHostMismatch, fmt.Sprintf("TLS server name %q in a connection to %s", first.serverName, target.Host))
	default:
		dc = p.decide(ctx, cc, target)
	}
	switch {
	case !dc.d.Allow:
	case dc.d.Inspect && first.proto == speaksOther:
		dc.deny(policies.ReasonInvalidRequest, "the rules for this host decide requests, and this connection is neither TLS nor HTTP/1, which the proxy could inspect")
	case !dc.d.Inspect:
		// Checked as an explicit CONNECT's tunnel is; an inspected one
		// terminates TLS itself, and needs no name.
		if reason, why := checkOpaque(first, target.Host); reason != "" {
			dc.deny(reason, why)
		}
	}
	if dc.d.Allow {
		p.resolve(ctx, dc)
	}
	// On record before anything is dialled; refused (audit_unavailable)
	// when it cannot be.
	p.admit(dc)

	switch {
	case !dc.d.Allow:
		p.refuseOpened(client, first, dc)
	case first.proto == speaksHTTP:
		p.servePlainIn(cc, client, t, first, dc)
	case dc.d.Inspect:
		p.inspect(cc, withEarly(client, first.early), t, dc)
	default:
		upstream, ok := p.dialChecked(dc)
		if !ok {
			p.refuseOpened(client, first, dc)
			return
		}
		defer upstream.Close()
		if first.silent() {
			// Decided on host and port while the client said nothing:
			// what it says first, however late, is checked as it would
			// have been at once.
			var end error
			if first, end, err = p.awaitClient(client, upstream); end != nil {
				p.endUnrelayed(client, dc, end, first)
				return
			}
			p.serveOpened(cc, client, raw, upstream, t, first, err, target.Host, dc)
			return
		}
		p.tunnel(raw, upstream, first, dc)
	}
}

// serveOpened serves an allowed opaque tunnel (raw, the client's socket,
// to upstream) once what its client opened it with is known (first, or
// err reading it): refused where a TLS server name names another host
// than host (checkOpaque), read as requests when it is HTTP, relayed
// otherwise.
func (p *Proxy) serveOpened(cc *clientConn, client, raw, upstream net.Conn, t *tracked, first opening, err error, host string, dc *decision) {
	if err != nil {
		dc.deny(policies.ReasonInvalidRequest, err.Error())
	} else if reason, why := checkOpaque(first, host); reason != "" {
		dc.deny(reason, why)
	}
	if !dc.d.Allow {
		p.refuseOpened(client, first, dc)
		return
	}
	if first.proto == speaksHTTP {
		upstream.Close() // each request has its own, pooled
		p.servePlainIn(cc, client, t, first, dc)
		return
	}
	p.tunnel(raw, upstream, first, dc)
}

// servePlainIn reads plain HTTP requests from a connection the proxy let
// through to dc's host (transparent, or a CONNECT's tunnel): every request
// is decided, as a plain request to the explicit proxy is, whether or not
// the host's rules restrict requests, its Host pinned to the host.
// Counted open until after its close line (Metrics.Forget).
func (p *Proxy) servePlainIn(cc *clientConn, c net.Conn, t *tracked, first opening, dc *decision) {
	p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, 1)
	defer p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, -1)
	defer p.record(dc, http.StatusOK, 0, first.greeted)
	p.serveRequests(cc, withEarly(c, first.early), t, dc, "")
}

// endUnrelayed records an allowed tunnel that ended while the proxy waited
// for its client's first bytes: idle, the client gone, the upstream failed
// (the client is reset, as the upstream's end was), or the shutdown.
func (p *Proxy) endUnrelayed(client net.Conn, dc *decision, end error, first opening) {
	if _, ok := errors.AsType[*upstreamAbort](end); ok {
		reset(rawConn(client))
	}
	switch {
	case errors.Is(end, errIdleTunnel):
		dc.detail = p.idleClosed()
	case p.forced.Err() != nil:
		dc.detail = errForced.Error()
	default:
		dc.detail = end.Error()
	}
	p.record(dc, http.StatusOK, 0, first.greeted)
}

// checkOpaque judges what a client of an opaque tunnel to host opened it
// with: a TLS server name must name host, or the tunnel would carry a
// connection to another host on the same address (a shared front, a CDN),
// decided as this one. To a name, a ClientHello must have one: without
// it the front serves its default host, which may be any of its tenants
// (every current client sends one for a dotted name; Java sends none for
// a single label). To an address, a client sends none (RFC 6066 has no
// name for an address).
func checkOpaque(first opening, host string) (policies.Reason, string) {
	if first.proto != speaksTLS {
		return "", ""
	}
	switch _, err := netip.ParseAddr(host); {
	case first.serverName == "" && err != nil:
		return policies.ReasonHostMismatch, "a TLS ClientHello without a server name in a tunnel to " + host + ", which a shared front would serve as its default host; send the host's name as the TLS server name, or connect to its address"
	case first.serverName != "" && !spelledAs(first.serverName, host):
		return policies.ReasonHostMismatch, fmt.Sprintf("TLS server name %q in a tunnel to %s", first.serverName, host)
	}
	return "", ""
}

// spelledAs reports whether a TLS server name relayed as it is names host
// (canonical) to whatever reads it: the same bytes but for ASCII case,
// which DNS and every front ignore. Not canonicalised first: IDNA maps a
// soft hyphen, a zero-width space or fullwidth letters to the host, and a
// front matching the name as sent would serve its default tenant.
func spelledAs(serverName, host string) bool {
	if len(serverName) != len(host) {
		return false
	}
	for i := range len(host) {
		c := serverName[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != host[i] {
			return false
		}
	}
	return true
}

// transparentTarget is the CONNECT a redirected connection to orig stands
// for: its synthetic address's name, or else the literal address; forgotten
// when the address is synthetic and its name is no longer known.
func transparentTarget(names NameMap, orig netip.AddrPort) (req policies.Request, forgotten bool) {
	req = policies.Request{Phase: policies.PhaseConnect, Host: orig.Addr().String(), Port: int(orig.Port())}
	if names == nil {
		return req, false
	}
	name, synthetic := names.Name(orig.Addr())
	switch {
	case !synthetic:
	case name == "":
		forgotten = true
	default:
		req.Host = name // the pool keeps names canonical (fakedns.Pool.Addr)
	}
	return req, forgotten
}

// sameName reports whether a name a client sent (TLS server name, Host)
// names host (canonical).
func sameName(serverName, host string) bool {
	// Spelled as decided, as clients nearly always send it: canonical
	// already (CanonicalHost is idempotent), not canonicalised again.
	if serverName == host {
		return true
	}
	c, err := policies.CanonicalHost(serverName)
	return err == nil && c == host
}

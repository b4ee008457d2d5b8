package proxy

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/elazarl/goproxy"
	"golang.org/x/net/http/httpguts"
)

// handlePlain decides an absolute-form request (GET http://host/path, or
// https:// sent to the proxy as plain HTTP) exactly as a request inside an
// inspected tunnel: the proxy sees it whole, so method and path rules apply.
func (p *Proxy) handlePlain(r *http.Request, gctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	dc := p.decidePlain(r)
	if !p.admit(dc) { // on record before goproxy dials the upstream
		p.record(dc, dc.status(), 0, 0)
		resp := dc.denialResponse(r)
		drainRefused(r, r.Body, resp.Header)
		return r, resp
	}
	r, body, guard := p.forwardPlain(r, dc)
	gctx.UserData = &plainState{dc: dc, body: body, guard: guard}
	gctx.RoundTripper = p.sendPlain // not goproxy's own http.Transport
	return r, nil
}

// drainRefused drains what is left of a refused request's body (body: the
// server's own) as refuse does inside a tunnel (drainWithin), so that its
// connection can carry the next request: a deadline that fired on the
// server's next read (its background read, the next request) would cancel
// every later request on it. A body not read to its end closes the
// connection after the answer (h its header), which the server then
// writes at once, reading none of it. A body the client waits to be asked
// for (Expect: 100-continue) is not asked for: the connection closes after
// the answer.
func drainRefused(r *http.Request, body io.Reader, h http.Header) {
	if body == nil || body == http.NoBody {
		return
	}
	if expectsContinue(r) || !drainWithin(connFrom(r.Context()).conn.SetReadDeadline, body) {
		closeLingering(r, h)
	}
}

// closeLingering makes an answer (h its header) the connection's last, the
// rest of r's body unread. The server reads on in that body once the
// answer is written (to reuse its buffer), and for refuseLinger at most,
// as a close lingers: unbounded, a client that stopped sending, or waits
// to be asked for its body, would hold the connection as long as it
// likes.
func closeLingering(r *http.Request, h http.Header) {
	h.Set("Connection", "close")
	connFrom(r.Context()).conn.SetReadDeadline(time.Now().Add(refuseLinger))
}

// decidePlain decides an absolute-form request, SSRF guard and credential
// lookup included. Its Host header needs no check against the URL: net/http,
// as RFC 9112 3.2.2 requires of a proxy, takes the URL's host and drops the
// header, so the upstream is sent the host decided.
func (p *Proxy) decidePlain(r *http.Request) *decision {
	ctx := r.Context()
	cc := connFrom(ctx)
	target := plainTarget(r)
	var dc *decision
	switch {
	case r.URL.Scheme != "http" && r.URL.Scheme != "https":
		dc = p.refused(cc, target, policies.ReasonInvalidRequest, "scheme "+strconv.Quote(r.URL.Scheme)+" is not http or https")
	default:
		dc = p.decideRequest(ctx, cc, r, target)
	}
	if dc.d.Allow {
		p.resolve(ctx, dc)
	}
	switch {
	case !dc.d.Allow:
	case len(dc.d.Inject) > 0 && r.URL.Scheme != "https":
		// A rule names a host and port, not a scheme: the same rule
		// matches http://host:443/. The credential would cross the
		// network in clear, so the request is not sent at all.
		dc.deny(policies.ReasonSecretUnavailable, plainInject)
	default:
		var err error
		if dc.scrub, err = p.inject(r.Header, dc.d.Inject); err != nil {
			dc.deny(policies.ReasonSecretUnavailable, err.Error())
		}
	}
	return dc
}

// plainInject is the detail of a plain http:// request a rule would
// inject a credential into.
const plainInject = "credentials are injected only into TLS connections, and this request is plain http://"

// plainTarget is what an absolute-form request asks for.
func plainTarget(r *http.Request) policies.Request {
	port := 80
	if r.URL.Scheme == "https" {
		port = 443
	}
	if ps := r.URL.Port(); ps != "" {
		port, _ = strconv.Atoi(ps)
	}
	return policies.Request{Phase: policies.PhaseRequest, Host: r.URL.Hostname(), Port: port, Method: r.Method}
}

// refuseFraming answers a request whose framing cannot be trusted
// (framingError) with a 400, and closes the connection: where its body
// ends, and so where the next request starts, is in doubt.
func (p *Proxy) refuseFraming(w http.ResponseWriter, r *http.Request, why string) {
	p.refuseClosing(w, r, p.malformed(connFrom(r.Context()), plainTarget(r), why))
}

// refuseClosing answers dc's denial of r on the connection taken over
// from the server, and closes it. Through w the status line would be
// net/http's own ("400 Bad Request"); taken over, it carries the reason
// and hint as every refusal's on a taken-over connection does
// (denialResponse). For refusals after which the connection ends anyway.
func (p *Proxy) refuseClosing(w http.ResponseWriter, r *http.Request, dc *decision) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil { // still refused, with net/http's status line
		w.Header().Set("Connection", "close")
		p.deny(w, r, dc, 0)
		return
	}
	conn = bareConn(conn)
	t, release := p.track(conn)
	defer release()
	defer connFrom(r.Context()).sb.active.Add(-1) // hijacked: the slot is ours to release
	if t == nil {
		dc.detail = shuttingDown
		p.record(dc, 0, 0, 0)
		return
	}
	defer conn.Close()
	p.refuseConn(conn, dc, r)
}

// forwardPlain points an allowed request at the canonical host the policy
// decided on (its Host header was checked to name the same host) and the
// addresses the guard checked, and counts its body, which ends if its
// client stops sending it (bodyGuard; stop it once the round trip is over).
func (p *Proxy) forwardPlain(r *http.Request, dc *decision) (*http.Request, *counter, *bodyGuard) {
	r = r.WithContext(dc.upstreamContext(r.Context()))
	r.URL.Host = net.JoinHostPort(dc.in.Request.Host, strconv.Itoa(dc.in.Request.Port))
	r.Host, r.Method = hostHeader(dc.in.Request.Host, dc.in.Request.Port, r.URL.Scheme), dc.in.Request.Method
	// The client's Connection: close ends its own connection (the server
	// read it from the request it keeps), not the pooled upstream one.
	r.Close = false
	// No trailer, as on the inspected path: read after the decision, its
	// fields are decided by nobody.
	r.Trailer = nil
	body := &counter{r: r.Body}
	var guard *bodyGuard
	if r.Body != nil && r.Body != http.NoBody {
		// The transport's close of it does not close the server's body,
		// which would read a rest of up to 256 KiB with no deadline: the
		// server discards it after the handler, within linger
		// (abandon).
		guard = newBodyGuard(r.Body, connFrom(r.Context()).conn.SetReadDeadline, p.cfg.Limits.IdleTimeout)
		body.r = guard
		r.Body = body
	}
	return r, body, guard
}

// deny writes dc's denial through w and records it.
func (p *Proxy) deny(w http.ResponseWriter, r *http.Request, dc *decision, up int64) {
	resp := dc.denialResponse(r)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	p.record(dc, resp.StatusCode, up, 0)
}

// unaskedSwitch is the detail of a 101 to a request hopByHop stripped.
const unaskedSwitch = "101 Switching Protocols to a request that asked for no WebSocket"

// hopByHop removes what belongs to the client's connection with the proxy
// (RFC 9110 7.6.1) before a request is decided and forwarded, and reports
// whether the request is a WebSocket upgrade, the one protocol switch the
// proxy relays. After any other switch the bytes would be a protocol the
// policy never sees: h2c would carry any method to any path in HTTP/2
// streams decided by nobody. Such a request goes on as a plain request,
// without its Upgrade, so no upstream switches.
func hopByHop(h http.Header) (websocket bool) {
	websocket = httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") &&
		len(h["Upgrade"]) == 1 && strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), "websocket")
	dropConnectionHeaders(h, websocket)
	h.Del("Proxy-Authorization")
	h.Del("Trailer")
	h.Del("Http2-Settings")
	if websocket {
		h.Set("Connection", "Upgrade")
	}
	return websocket
}

// hopByHopResponse removes from a response (other than a 101) what
// described the upstream's connection with the proxy: its Connection
// header and the headers it names, Keep-Alive, Upgrade. Passed on, an
// upstream's "Connection: close" would end the client's connection, and
// its keep-alive limits would be taken for the proxy's.
func hopByHopResponse(h http.Header) { dropConnectionHeaders(h, false) }

// dropConnectionHeaders removes the Connection header, the headers it
// names and the other hop-by-hop headers of RFC 9110 7.6.1; keepUpgrade
// keeps Upgrade for a WebSocket handshake.
func dropConnectionHeaders(h http.Header, keepUpgrade bool) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" && !(keepUpgrade && strings.EqualFold(name, "upgrade")) {
				h.Del(name)
			}
		}
	}
	for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te"} {
		h.Del(name)
	}
	if !keepUpgrade {
		h.Del("Upgrade")
	}
}

// plainUpgrade serves an absolute-form WebSocket upgrade (ws:// through the
// proxy): decided like any plain request, then, after the 101, frames are
// relayed untouched. goproxy's handler would relay only one direction.
func (p *Proxy) plainUpgrade(w http.ResponseWriter, r *http.Request) {
	dc := p.decidePlain(r)
	if dc.d.Allow && dc.scrub != nil {
		dc.deny(policies.ReasonWebSocketInjects, unscrubbableFrames)
	}
	if !p.admit(dc) { // on record before the upstream is dialled
		drainRefused(r, r.Body, w.Header())
		p.deny(w, r, dc, 0)
		return
	}
	r, body, guard := p.forwardPlain(r, dc)
	out := r.Clone(r.Context())
	out.RequestURI = ""
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		guard.stop() // the failed round trip waited for its reads
		drainRefused(r, guard.unread(), w.Header())
		dc.deny(upstreamFailure(err), err.Error())
		p.deny(w, r, dc, body.n())
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		hopByHopResponse(resp.Header)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		if guard.answer() { // answered before the body's end
			w.Header().Set("Connection", "close")
			defer guard.abandon(refuseLinger)
		}
		w.WriteHeader(resp.StatusCode)
		down := &counter{r: resp.Body}
		io.Copy(w, down)
		noteTruncated(dc, down)
		p.noteStalled(dc, connFrom(r.Context()))
		p.record(dc, resp.StatusCode, body.n(), down.n())
		abortIfTruncated(down)
		return
	}
	guard.abandon(0) // the connection carries frames from now on
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		resp.Body.Close()
		dc.deny(policies.ReasonUpstreamError, "cannot take over the client connection: "+err.Error())
		p.record(dc, dc.status(), body.n(), 0)
		return
	}
	conn = bareConn(conn)
	t, release := p.track(conn)
	defer release()
	cc := connFrom(r.Context())
	defer cc.sb.active.Add(-1) // hijacked: the slot is ours to release
	cc.conn.frames.stop()      // frames follow, not requests
	if t == nil {
		resp.Body.Close()
		dc.detail = shuttingDown
		p.record(dc, 0, body.n(), 0)
		return
	}
	defer conn.Close()
	p.upgrade(conn, brw.Reader, resp, dc, body)
}

type plainState struct {
	dc    *decision
	body  *counter
	guard *bodyGuard
}

// handlePlainResponse records the outcome of a forwarded plain request once
// its body has been relayed, and turns an upstream failure into a JSON 502.
func (p *Proxy) handlePlainResponse(resp *http.Response, gctx *goproxy.ProxyCtx) *http.Response {
	st, ok := gctx.UserData.(*plainState)
	if !ok {
		return resp // a denial this proxy wrote itself: already recorded
	}
	if resp == nil {
		st.guard.stop() // the failed round trip waited for its reads
		var resp *http.Response
		if badBody(st.dc, st.body) {
			// The rest of the body cannot be told from a next
			// request, and is not read on.
			resp = st.dc.denialResponse(gctx.Req)
			closeLingering(gctx.Req, resp.Header)
		} else {
			detail := "no response"
			if gctx.Error != nil {
				detail = gctx.Error.Error()
			}
			st.dc.deny(policies.ReasonUpstreamError, detail)
			resp = st.dc.denialResponse(gctx.Req)
			drainRefused(gctx.Req, st.guard.unread(), resp.Header)
		}
		p.record(st.dc, st.dc.status(), st.body.n(), 0)
		return resp
	}
	// Answered before the body's end, which the transport may still be
	// reading: the connection closes after the answer (the server then
	// writes it at once, reading nothing of the body first), and once
	// the answer has been relayed, or refused, the transport's reading
	// ends.
	pending := st.guard.answer()
	refuseAnswer := func(detail string) *http.Response {
		resp.Body.Close()
		if pending {
			st.guard.abandon(refuseLinger)
		}
		st.dc.deny(policies.ReasonUpstreamError, detail)
		p.record(st.dc, st.dc.status(), st.body.n(), 0)
		refusal := st.dc.denialResponse(gctx.Req)
		if pending {
			refusal.Header.Set("Connection", "close")
		}
		return refusal
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The request went without Upgrade (hopByHop): a switch nobody
		// asked for is not relayed.
		return refuseAnswer(unaskedSwitch)
	}
	if err := st.dc.scrub.response(gctx.Req, resp); err != nil {
		return refuseAnswer(err.Error())
	}
	hopByHopResponse(resp.Header)
	if pending {
		resp.Header.Set("Connection", "close")
	}
	down := &recordOnClose{counter: counter{r: resp.Body}}
	down.done = func(n int64) {
		noteTruncated(st.dc, &down.counter)
		p.noteStalled(st.dc, connFrom(gctx.Req.Context()))
		p.record(st.dc, resp.StatusCode, st.body.n(), n)
		if pending {
			st.guard.abandon(refuseLinger)
		}
	}
	if sw, ok := gctx.Req.Context().Value(streamKey{}).(*streamWriter); ok {
		sw.stream = resp.ContentLength < 0
		sw.length = resp.ContentLength
		sw.body = &down.counter
	}
	resp.Body = down
	return resp
}

// noteTruncated puts in dc's audit detail that the upstream ended the
// response body early, if it did.
func noteTruncated(dc *decision, body *counter) {
	if err := body.failed(); err != nil {
		dc.detail = "upstream response body ended early: " + err.Error()
	}
}

// abortIfTruncated ends the client's connection without completing the
// response when the upstream's body ended early: a chunked response closed
// properly, or a close-delimited one, would hand the client a truncated
// body as a whole one. http.Server recovers this panic by closing.
func abortIfTruncated(body *counter) {
	if body != nil && body.failed() != nil {
		panic(http.ErrAbortHandler)
	}
}

// recordOnClose calls done with the bytes read when the body is closed.
type recordOnClose struct {
	counter
	done func(int64)
}

func (r *recordOnClose) Close() error {
	err := r.counter.Close()
	if r.done != nil {
		r.done(r.n())
		r.done = nil
	}
	return err
}

// streamWriter writes a plain response to the client. goproxy drops
// Content-Length once the body is wrapped for counting, so the response
// hook, which still sees the upstream's length, tells it the length (put
// back on the header: a HEAD answer keeps its size, and a body that ends
// short of it is an error to the client) and whether the response is a
// stream. A stream is flushed after every write: goproxy flushes
// server-sent events only, and any other stream (NDJSON, a long poll
// answered bit by bit) would wait in the server's buffer for 4 KiB or for
// its end.
type streamWriter struct {
	http.ResponseWriter
	stream bool
	length int64    // the upstream's Content-Length; -1 unknown
	body   *counter // the upstream's body, to tell a truncated one
}

type streamKey struct{}

func (s *streamWriter) WriteHeader(code int) {
	h := s.Header()
	if s.length >= 0 && bodyAllowed(code) && h.Get("Transfer-Encoding") == "" {
		h.Set("Content-Length", strconv.FormatInt(s.length, 10))
	}
	s.ResponseWriter.WriteHeader(code)
}

// bodyAllowed reports whether a response with this status may have a body
// (RFC 9110 6.4.1), and so a Content-Length.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

func (s *streamWriter) Write(p []byte) (int, error) {
	n, err := s.ResponseWriter.Write(p)
	if err == nil && s.stream {
		err = http.NewResponseController(s.ResponseWriter).Flush()
	}
	return n, err
}

// ReadFrom keeps the server's own ReadFrom, with its pooled buffers, for a
// body of known length; a stream is copied through Write, which flushes.
func (s *streamWriter) ReadFrom(r io.Reader) (int64, error) {
	if s.stream {
		return io.Copy(struct{ io.Writer }{s}, r)
	}
	return io.Copy(s.ResponseWriter, r)
}

func (s *streamWriter) Flush() { http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the server's writer.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

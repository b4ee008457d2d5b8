package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cginame"
	"github.com/airlock-sandbox/airlock/policies"
	"golang.org/x/sys/unix"
)

// inspect terminates TLS for an allowed connection to an inspected host
// (a CONNECT the client has been answered, or a transparent connection)
// and decides every request inside it. The leaf certificate is for the
// decided host, and every request must name that same host (Host header,
// absolute-form URL, SNI): an allowed tunnel never reaches another host.
func (p *Proxy) inspect(cc *clientConn, client net.Conn, t *tracked, dc *decision) {
	// Counted open until after its close line (Metrics.Forget).
	p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, 1)
	defer p.cfg.Metrics.tunnelOpen(dc.in.Sandbox.ID, -1)
	// The tunnel's close line, when it ends; each request in it has its
	// own lines.
	status := http.StatusOK
	defer func() { p.record(dc, status, 0, 0) }()
	tc, err := p.serverTLS(client, dc.in.Request.Host)
	if err != nil {
		dc.detail = err.Error()
		return
	}
	p.serveRequests(cc, tc, t, dc, tc.ConnectionState().ServerName)
}

// localCurves are the key exchanges of the client's leg, in order. Go
// would choose X25519MLKEM768 whenever a client offers it, which costs
// the proxy more than the rest of its handshake; its post-quantum half
// protects recorded traffic from a future decryption, and this leg never
// leaves the machine (a client the proxy cannot attribute to a local
// process is refused), so it is not worth its cost here. The upstream leg
// keeps Go's defaults.
var localCurves = []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384}

// serverTLS completes the client's handshake as leafName, with a leaf
// from the airlock CA, within the handshake timeout.
func (p *Proxy) serverTLS(c net.Conn, leafName string) (*tls.Conn, error) {
	tickets, err := p.cfg.CA.TicketConfig()
	if err != nil {
		return nil, err
	}
	cfg := tickets.Clone() // the CA's session ticket keys, shared
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.cfg.CA.Leaf(leafName) }
	// HTTP/2 would multiplex requests the proxy decides one by one. A
	// client offering only http/1.0 (curl -0) is served too: with no
	// protocol in common, Go would fail its handshake.
	cfg.NextProtos = []string{"http/1.1", "http/1.0"}
	cfg.MinVersion = tls.VersionTLS12
	cfg.CurvePreferences = localCurves
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.ContainsFunc(h.SupportedCurves, func(id tls.CurveID) bool { return slices.Contains(localCurves, id) }) {
			return nil, nil
		}
		// A client with only post-quantum key exchanges: Go's own.
		pq := cfg.Clone()
		pq.CurvePreferences, pq.GetConfigForClient = nil, nil
		return pq, nil
	}
	tc := tls.Server(c, cfg)
	tc.SetDeadline(time.Now().Add(p.cfg.Limits.HandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("client TLS handshake: %w", err)
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// serveRequests decides and forwards, one by one, the HTTP/1 requests a
// client sends on c (an inspected tunnel's TLS, or a transparent plain
// HTTP connection), each pinned to dc's host and port, and to sni, the TLS
// server name when there is one.
func (p *Proxy) serveRequests(cc *clientConn, c net.Conn, t *tracked, dc *decision, sni string) {
	host := dc.in.Request.Host
	// Request headers are read through a limit, as http.Server reads them
	// with MaxHeaderBytes: a sandbox must not grow the proxy's memory at
	// will. Bodies, and bytes after an upgrade, are not capped here.
	lim := &io.LimitedReader{R: c}
	tap := &headerTap{r: lim}
	br := bufio.NewReaderSize(tap, 16<<10)
	// Responses are written through a buffer: written straight to the TLS
	// connection, every header line would be a record and a syscall.
	bw := bufio.NewWriterSize(c, 16<<10)
	headerLimit := int64(p.cfg.Limits.MaxHeaderBytes) + 4096 // and the request line, as net/http allows
	for {
		c.SetReadDeadline(time.Now().Add(p.cfg.Limits.IdleTimeout))
		lim.N = headerLimit
		if !p.awaitRequest(t, br) {
			return // closed, idle too long, or the proxy is shutting down
		}
		// Once a request has begun, its header must arrive as promptly as
		// http.Server demands of plain requests: a client dribbling one
		// header line a minute must not hold the tunnel for the idle time.
		c.SetReadDeadline(time.Now().Add(p.cfg.Limits.ReadHeaderTimeout))
		req, raw, err := tap.readRequest(br)
		var bad *decision
		target := policies.Request{Phase: policies.PhaseRequest, Host: host, Port: dc.in.Request.Port}
		switch {
		case err == nil:
			if why := framingError(raw); why != "" {
				target.Method = req.Method
				bad = p.malformed(cc, target, why)
			}
		case lim.N <= 0:
			bad = p.unreadable(cc, target, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request header larger than %d bytes", p.cfg.Limits.MaxHeaderBytes))
		case isTimeout(err):
			// A header begun and not finished in time (slowloris): the
			// connection is cut, and that is a refusal on record.
			p.record(p.refused(cc, target, policies.ReasonInvalidRequest, headerTimeoutDetail(p.cfg.Limits.ReadHeaderTimeout)), 0, 0, 0)
			return
		case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
			return
		default:
			bad = p.malformed(cc, target, "malformed request: "+unquoted(err))
		}
		if bad != nil {
			resp := bad.denialResponse(nil)
			resp.Close = true
			writeResponse(bw, resp)
			p.record(bad, resp.StatusCode, 0, 0)
			closeAnswered(c)
			return
		}
		c.SetReadDeadline(time.Time{})
		lim.N = math.MaxInt64
		if !p.serveInner(cc, c, br, bw, req, dc, sni) {
			closeAnswered(c)
			return
		}
	}
}

// closeAnswered readies a client connection for its close after the
// proxy's last answer: TLS's close_notify, if it is TLS, then linger on the
// socket.
func closeAnswered(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		tc.SetWriteDeadline(time.Now().Add(refuseLinger))
		tc.CloseWrite()
		c = tc.NetConn()
	}
	linger(c, maxLinger)
}

// socketOf is the connection under c's TLS, if c is TLS.
func socketOf(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// writeResponse writes resp through bw and flushes it. The body is read
// through flushFirst, so a streamed response (server-sent events, long
// polls) reaches the client as the upstream produces it, not when the
// buffer fills. A body of known length is no stream: its first bytes
// go out with the header, in one write (one TLS record, one syscall), and
// a small one whole.
func writeResponse(bw *bufio.Writer, resp *http.Response) error {
	if resp.Body != nil {
		resp.Body = &flushFirst{ReadCloser: resp.Body, w: bw, hold: resp.ContentLength > 0}
	}
	// Hide bufio.Writer's ReadFrom: it reads into the buffer that
	// flushFirst would flush underneath it.
	if err := resp.Write(struct{ io.Writer }{bw}); err != nil {
		return err
	}
	return bw.Flush()
}

// flushFirst flushes w before each read of the body: what the last read
// produced goes out before the next can wait on the upstream. With hold,
// the first read is not flushed before: the header waits for the body's
// first bytes.
type flushFirst struct {
	io.ReadCloser
	w    *bufio.Writer
	hold bool
}

func (f *flushFirst) Read(p []byte) (int, error) {
	if f.hold {
		f.hold = false
	} else if err := f.w.Flush(); err != nil {
		return 0, err
	}
	return f.ReadCloser.Read(p)
}

// serveInner decides and forwards one request from an inspected tunnel, or
// from a transparent plain HTTP connection (c not TLS: forwarded as
// http://). It reports whether the connection may carry another request.
func (p *Proxy) serveInner(cc *clientConn, c net.Conn, br *bufio.Reader, bw *bufio.Writer, req *http.Request, tun *decision, sni string) bool {
	// Upstream connections go to the addresses checked at CONNECT.
	ctx, cancel := context.WithCancelCause(tun.upstreamContext(context.Background()))
	defer cancel(nil)
	t := &tun.in.Request
	// The path as sent, for the refusals below to say what was asked;
	// decideRequest reads it for the policy.
	target := policies.Request{Phase: policies.PhaseRequest, Host: t.Host, Port: t.Port, Method: req.Method, Path: req.URL.EscapedPath()}
	websocket := hopByHop(req.Header)
	var rdc *decision
	if strings.EqualFold(req.Method, http.MethodConnect) {
		// A CONNECT's content is no content (RFC 9110, 9.3.6): an
		// upstream that reads what follows its head as the next request
		// would serve one nothing decided, and one that answers 2xx would
		// make the rest of the connection a tunnel nothing inspects. The
		// connection closes: where the request ends is in doubt.
		req.Close = true
		return p.refuse(c, bw, req, p.refused(cc, target, policies.ReasonInvalidRequest, "CONNECT inside a tunnel or a plain HTTP connection: a tunnel is asked of the proxy itself, never forwarded"))
	}
	if mismatch := pinnedHost(req, sni, t.Host, t.Port); mismatch != "" {
		return p.refuse(c, bw, req, p.refused(cc, target, policies.ReasonHostMismatch, mismatch))
	}
	rdc = p.decideRequest(ctx, cc, req, target)
	if !rdc.d.Allow {
		return p.refuse(c, bw, req, rdc)
	}

	// Forward exactly to the tunnel's host: the request line and Host header
	// were checked against it above.
	out := req.Clone(ctx)
	out.RequestURI = ""
	// No trailer: its fields (a method override, X-Original-URL) come
	// after the decision, and servers that merge them into the header
	// would act on them.
	out.Trailer = nil
	// The client's Connection: close is about its connection with the
	// proxy (hopByHop dropped the header): the upstream connection stays
	// pooled for the next request, tunnel or client, instead of a new
	// upstream handshake for each.
	out.Close = false
	out.URL.Scheme = "http"
	if _, ok := c.(*tls.Conn); ok {
		out.URL.Scheme = "https"
	}
	out.URL.Host = net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	out.Host, out.Method = hostHeader(t.Host, t.Port, out.URL.Scheme), rdc.in.Request.Method
	var err error
	if len(rdc.d.Inject) > 0 && out.URL.Scheme != "https" {
		rdc.deny(policies.ReasonSecretUnavailable, plainInject)
		return p.refuse(c, bw, req, rdc)
	}
	if rdc.scrub, err = p.inject(out.Header, rdc.d.Inject); err != nil {
		rdc.deny(policies.ReasonSecretUnavailable, err.Error())
		return p.refuse(c, bw, req, rdc)
	}
	if websocket && rdc.scrub != nil {
		rdc.deny(policies.ReasonWebSocketInjects, unscrubbableFrames)
		return p.refuse(c, bw, req, rdc)
	}
	if !p.admit(rdc) { // on record before the upstream is dialled
		return p.refuse(c, bw, req, rdc)
	}
	var cont *continuer
	if expectsContinue(req) {
		cont = &continuer{bw: bw, body: req.Body}
		req.Body = cont
	}
	// Clone shared req.Body (http.NoBody when there is none): only the
	// counted body goes upstream, and only when there is one, so that a
	// bodiless request is never taken for a body left unread below. The
	// transport's close of it (on an upstream failure, or an answer before
	// the body's end) does not close the client's body: net/http would
	// read that to its end, with no bound and no deadline, before the
	// answer. What is left of it is refuse's to drain, or the close's;
	// and one its client stops sending ends (bodyGuard).
	body := &counter{}
	var guard *bodyGuard
	out.Body = nil
	if req.Body != nil && req.Body != http.NoBody {
		guard = newBodyGuard(req.Body, c.SetReadDeadline, p.cfg.Limits.IdleTimeout)
		body.r = guard
		out.Body = body
	}
	switch {
	case websocket:
	case out.Body == nil:
		defer watchClient(c, br, cancel, watchDelay)()
	default:
		// Watched once its body has all been read (a POST answered by a
		// stream, as MCP's are): nothing reads the client after that.
		w := &lateWatch{}
		guard.onEOF = func() { w.start(func() func() { return watchClient(c, br, cancel, watchDelay) }) }
		defer w.end()
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		guard.stop() // the failed round trip waited for its reads
		cont.final()
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		if badBody(rdc, body) {
			return p.refuse(c, bw, req, rdc)
		}
		rdc.deny(upstreamFailure(err), err.Error())
		return p.refuse(c, bw, req, rdc)
	}
	// The transport may still be sending the body (the upstream answered
	// before its end): its reading ends before anything else reads the
	// connection, the loop or the close after the last request.
	defer guard.abandon(0)
	// A client that stops sending its body once answered must not cut
	// the answer it is reading: no deadline until then. Answered before
	// the body's end, which the transport may still be reading from br:
	// the loop must not read its next request there, so this request is
	// the last. So too when the upstream answered without asking for the
	// body, which the client still holds.
	answeredEarly := guard.answer()
	last := !cont.final() || answeredEarly
	if resp.StatusCode == http.StatusSwitchingProtocols {
		guard.abandon(0)
		if !websocket { // the request went without Upgrade: a switch nobody asked for
			resp.Body.Close()
			rdc.deny(policies.ReasonUpstreamError, unaskedSwitch)
			p.refuse(c, bw, req, rdc)
			return false
		}
		p.upgrade(c, br, resp, rdc, body)
		return false
	}
	if err := rdc.scrub.response(req, resp); err != nil {
		resp.Body.Close()
		guard.abandon(0)
		rdc.deny(policies.ReasonUpstreamError, err.Error())
		p.refuse(c, bw, req, rdc)
		return false
	}
	last = frame(req, resp, last)
	down := &counter{r: resp.Body}
	resp.Body = down
	err = writeResponse(bw, resp)
	down.Close()
	switch {
	case errors.Is(context.Cause(ctx), errClientGone):
		// Whatever the write said: the cancellation can close the
		// upstream gracefully, and its body then ends clean.
		rdc.detail = errClientGone.Error()
	case err != nil:
		noteTruncated(rdc, down)
		p.noteStalled(rdc, cc)
		if rdc.detail == "" {
			// The upstream's body was whole and the client was not
			// stalled: the write to it failed before the watch saw it go.
			rdc.detail = errClientGone.Error()
		}
		// The answer was cut short: a reset, not the orderly close that
		// ends a body an HTTP/1.0 client reads to the close, which would
		// hand it the part as the whole.
		reset(socketOf(c))
	}
	p.record(rdc, resp.StatusCode, body.n(), down.n())
	return err == nil && !last
}

// reset closes c with a TCP reset (SO_LINGER 0).
func reset(c net.Conn) {
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			})
		}
	}
	c.Close()
}

// frame readies an upstream response for the client's connection, which
// is the proxy's, not the upstream's: the upstream's hop-by-hop headers go,
// its closing its own connection does not close the client's, and a body
// of unknown length is chunked for an HTTP/1.1 client rather than ended by
// a close. It reports whether the client's connection ends after this
// response (last, or the client asked, or a body only a close can end),
// and says so in the response.
func frame(req *http.Request, resp *http.Response, last bool) bool {
	hopByHopResponse(resp.Header)
	// The status line is the proxy's: HTTP/1.1, whatever the upstream
	// spoke, so that chunking is legal on it.
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	switch {
	case req.Method == http.MethodHead || !bodyAllowed(resp.StatusCode):
		// No body follows, whatever the length says: nothing to frame.
		if resp.ContentLength < 0 {
			resp.ContentLength = 0
		}
		resp.TransferEncoding = nil
	case resp.ContentLength >= 0:
	case req.ProtoAtLeast(1, 1):
		resp.TransferEncoding = []string{"chunked"}
	default:
		// An HTTP/1.0 client knows no chunks: the body ends with the
		// connection.
		resp.TransferEncoding = nil
		last = true
	}
	// An HTTP/1.0 client closes unless told otherwise, which this proxy
	// does not tell it.
	last = last || req.Close || !req.ProtoAtLeast(1, 1)
	resp.Close = last
	return last
}

// errClientGone cancels an inner request whose client has closed its end.
var errClientGone = errors.New("the client closed the connection before the response was complete")

// watchClient cancels a bodiless inner request when its client goes away
// while the upstream is slow to answer or pauses a stream: the upstream
// connection is then released at once, not when the upstream next writes or
// the response header timeout ends. As in http.Server's background read, a
// client that half-closes its end counts as gone. Bytes the client sends
// meanwhile (its next request) stay in br for the loop. The returned stop
// ends the watch before the loop reads br again.
//
// The watch begins after watchDelay: most answers come sooner, and for them
// the proxy then spends no goroutine, read and deadline changes on a
// client that is waiting, as nearly all are. One that left meanwhile is
// seen when the watch begins.
func watchClient(c net.Conn, br *bufio.Reader, cancel context.CancelCauseFunc, after time.Duration) (stop func()) {
	done := make(chan struct{}) // closed when the watch has ended
	timer := time.AfterFunc(after, func() {
		defer close(done)
		if _, err := br.Peek(1); err != nil && !isTimeout(err) {
			cancel(errClientGone)
		}
	})
	return func() {
		if timer.Stop() {
			return // the watch never began
		}
		// A deadline in the past wakes the read, or fails it at once if
		// it has not begun; crypto/tls keeps the connection usable after
		// a timeout.
		c.SetReadDeadline(aLongTimeAgo)
		<-done
		c.SetReadDeadline(time.Time{})
	}
}

// watchDelay is how long an inner request waits for its answer before its
// client is watched (watchClient).
const watchDelay = 50 * time.Millisecond

// unquoted is a parse error's message without what it quotes: net/http
// quotes the request line (query values) or a header line (credentials),
// neither of which may reach a denial or the audit log.
func unquoted(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	if i := strings.IndexAny(msg, `":`); i >= 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	return msg
}

// decideRequest canonicalises what the policy needs and asks it. Its
// headers have been through hopByHop.
func (p *Proxy) decideRequest(ctx context.Context, cc *clientConn, req *http.Request, target policies.Request) *decision {
	target.Path = req.URL.EscapedPath()
	if req.URL.Opaque != "" {
		target.Path = req.URL.Opaque
	}
	if req.Header.Get("Upgrade") != "" { // hopByHop left it: a WebSocket
		target.Upgrade = "websocket"
	}
	q, err := policies.CanonicalQuery(req.URL.RawQuery)
	if err != nil {
		return p.refused(cc, target, policies.ReasonInvalidRequest, err.Error())
	}
	target.Query = q
	for k := range req.Header {
		if cginame.OneOf(k, rewriteHeaders) {
			return p.refused(cc, target, policies.ReasonInvalidRequest, "header "+k+" names another path for the upstream to serve than the one decided; send the request to that path instead")
		}
	}
	dc := p.decide(ctx, cc, target)
	for _, o := range methodOverrides(req.Header, q) {
		if !dc.d.Allow {
			break
		}
		// The upstream may act on the request as this method: it must be
		// allowed as that too. Asked from the request as sent (target):
		// dc.in's is canonical already, and decoded again it would name
		// another path.
		in := dc.in
		in.Request = target
		in.Request.Method = o.method
		if d := p.cfg.Decider.Decide(ctx, &in); !d.Allow {
			// Decided, audited and answered as the method it would be
			// taken for, the detail naming the one it was sent as. A
			// query's value is never written down (it may be a secret)
			// unless it is one of HTTP's own methods.
			dc.d = d
			switch {
			case o.fromQuery && (d.Reason == policies.ReasonInvalidRequest || d.Error == "" && !httpMethods[in.Request.Method]):
				// The error of a value that is no method quotes it.
				dc.detail = fmt.Sprintf("a %s with %s naming a method this request may not be taken for (a query's values are not written down)", dc.in.Request.Method, o.via)
			case o.fromQuery && d.Error != "":
				dc.detail = fmt.Sprintf("a %s with %s naming another method: %s", dc.in.Request.Method, o.via, d.Error)
			case d.Error != "":
				dc.detail = fmt.Sprintf("a %s with %s %q: %s", dc.in.Request.Method, o.via, o.method, d.Error)
			default:
				dc.detail = fmt.Sprintf("a %s with %s %q: the upstream may take it for that method", dc.in.Request.Method, o.via, o.method)
				if d.Detail != "" { // what failed, as that method
					dc.detail += "; " + d.Detail
				}
				dc.in = in
			}
		}
	}
	return dc
}

// methodOverride is a method a request names for itself besides its own,
// and where (fromQuery: a query's value, never written down).
type methodOverride struct {
	via, method string
	fromQuery   bool
}

// overrideHeaders are the headers frameworks and APIs read a request's
// "real" method from (Google's APIs, Rails, Laravel, Symfony, Express's
// method-override): a GET a read-only rule allows would be a DELETE there.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// httpMethods are the methods of HTTP's own specifications (RFC 9110,
// RFC 5789): a query's _method naming one of them is no secret to hide.
var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// rewriteHeaders are headers IIS's URL rewriting sets for the application
// behind it, and that frameworks (Zend, Symfony) have routed on instead
// of the request's own path: a request decided for /public would be
// served as the path they name. Under any spelling a CGI-style server
// reads as theirs (cginame).
var rewriteHeaders = []string{"X-Original-Url", "X-Rewrite-Url"}

// methodOverrides lists the methods a request asks to be taken for: its
// override headers' values, however spelled, and its query's _method
// (Laravel and Symfony read it from the query of a POST). A form body's
// _method cannot be seen.
func methodOverrides(h http.Header, q map[string][]string) []methodOverride {
	var out []methodOverride
	add := func(via string, vals []string, fromQuery bool) {
		for _, v := range vals {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, methodOverride{via, v, fromQuery})
			}
		}
	}
	for k, vals := range h {
		if cginame.OneOf(k, overrideHeaders) {
			add("header "+k, vals, false)
		}
	}
	for name, vals := range q {
		// As the policy reads a param's name (PHP's and qs's spellings,
		// any case, look-alike letters): .method, _METHOD[] and ．method
		// are _method to some server.
		if policies.ParamKey(name) == "_method" {
			add("query parameter "+name, vals, true)
		}
	}
	return out
}

// pinnedHost checks that a request inside a tunnel names the tunnel's host
// everywhere it names a host; it returns what differs.
func pinnedHost(req *http.Request, sni, host string, port int) string {
	if sni != "" && !sameName(sni, host) {
		return fmt.Sprintf("TLS server name %q in a tunnel to %s", sni, host)
	}
	if req.URL.IsAbs() && !sameHost(req.URL.Host, host, port) {
		return fmt.Sprintf("request URL host %q in a tunnel to %s", req.URL.Host, host)
	}
	if !sameHost(req.Host, host, port) {
		return fmt.Sprintf("Host header %q in a tunnel to %s", req.Host, host)
	}
	return ""
}

// sameHost compares a Host value (host or host:port) with the tunnel's
// canonical host and port; the port may be omitted when it is the default.
func sameHost(hostport, host string, port int) bool {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		h, p = hostport, ""
	}
	if !sameName(h, host) {
		return false
	}
	var digits [20]byte
	return p == "" || p == string(strconv.AppendInt(digits[:0], int64(port), 10))
}

// hostHeader is the Host a request decided for host and port goes out
// with: the canonical name the policy decided on, whatever the client's
// spelling that reads as it (a fullwidth "ａｐｉ.test" is "api.test" to
// the policy, but would reach the upstream as its own punycode, another
// name and perhaps another tenant's, with the injected secret), and the
// port unless it is the scheme's own.
func hostHeader(host string, port int, scheme string) string {
	if port == 443 && scheme == "https" || port == 80 && scheme == "http" {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// refuse answers a denied inner request and records it. The connection
// stays usable unless the client asked to close it, or waits to be told to
// send its body (Expect: 100-continue), which it now never will be.
func (p *Proxy) refuse(c net.Conn, bw *bufio.Writer, req *http.Request, dc *decision) bool {
	pending := expectsContinue(req)
	// The next request starts where this body ends: a body left unread
	// (held for a 100 Continue, over the drain limit, or not sent in
	// time) would be read as requests, so the connection is closed
	// instead.
	// A body that could not be read (a stall, bad chunks: serverStatus)
	// is not read on.
	framed := req.Body == nil || req.Body == http.NoBody
	if !framed && !pending && dc.serverStatus == 0 {
		framed = drainWithin(c.SetReadDeadline, req.Body)
	}
	resp := dc.denialResponse(req)
	resp.Close = req.Close || !framed
	err := writeResponse(bw, resp)
	p.record(dc, resp.StatusCode, 0, 0)
	return err == nil && !resp.Close
}

// maxRefusedBody is the most of a refused request's body read to keep its
// connection.
const maxRefusedBody = 1 << 20

// drainWithin reads what is left of a refused request's body, up to
// maxRefusedBody and within refuseLinger (set: its connection's read
// deadline), and reports whether it came to its end: only then may the
// connection carry another request. A client that stalls its body holds
// the answer no longer. The deadline is cleared then, before it can fire
// on the connection's next read.
func drainWithin(set func(time.Time) error, body io.Reader) bool {
	set(time.Now().Add(refuseLinger))
	if _, err := io.CopyN(io.Discard, body, maxRefusedBody+1); err != io.EOF {
		return false
	}
	set(time.Time{})
	return true
}

// upgrade completes a protocol switch (WebSocket): the 101 goes to the
// client, then frames are relayed untouched in both directions until
// either side ends or both are quiet for the tunnel idle timeout.
func (p *Proxy) upgrade(tc net.Conn, br io.Reader, resp *http.Response, dc *decision, body *counter) {
	upstream, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		dc.deny(policies.ReasonUpstreamError, "101 response without a connection")
		p.record(dc, dc.status(), 0, 0)
		return
	}
	defer upstream.Close()
	// The 101 in one write: over TLS, one record.
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/1.1 101 %s\r\n", http.StatusText(http.StatusSwitchingProtocols))
	resp.Header.Write(&head)
	head.WriteString("\r\n")
	tc.Write(head.Bytes())
	// A WebSocket may stay quiet for long, but not forever: its client
	// socket carries its traffic both ways, so watching it alone is
	// enough. Closing it must close the upstream too: an upstream that
	// stopped reading, and sends nothing, holds both copies blocked on
	// its side.
	stopIdle := watchIdle(p.cfg.Limits.TunnelIdleTimeout, closingToo{socketOf(tc), upstream})
	var wg sync.WaitGroup
	var down int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		down, _ = io.Copy(tc, upstream)
		if cw, ok := tc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	up, _ := io.Copy(upstream, br) // br holds anything read past the request
	upstream.Close()
	wg.Wait()
	if stopIdle() {
		dc.detail = p.idleClosed()
	}
	p.record(dc, http.StatusSwitchingProtocols, body.n()+up, down)
}

// expectsContinue reports whether the client holds the request's body until
// it is told "100 Continue" and has not been told yet.
func expectsContinue(req *http.Request) bool {
	if c, ok := req.Body.(*continuer); ok {
		return !c.sent()
	}
	return req.Body != nil && req.Body != http.NoBody && strings.EqualFold(req.Header.Get("Expect"), "100-continue")
}

// continuer answers Expect: 100-continue for a forwarded request: "100
// Continue" goes to the client when the upstream first reads the body (the
// transport waits for the upstream's own 100 first), so the body moves only
// once it is wanted. final marks the start of the response, after which no
// 100 may be written.
type continuer struct {
	mu   sync.Mutex
	bw   *bufio.Writer
	body io.ReadCloser
	told bool // "100 Continue" sent: the client sends its body
	done bool // the final response has begun
}

func (c *continuer) Read(p []byte) (int, error) {
	c.mu.Lock()
	if !c.told && !c.done {
		c.told = true
		c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := c.bw.Flush(); err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()
	return c.body.Read(p)
}

func (c *continuer) Close() error { return c.body.Close() }

func (c *continuer) sent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.told
}

// final reports whether the client was told to send its body; nil (no
// expectation) counts as told.
func (c *continuer) final() bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	return c.told
}

// counter counts what is read through it. The transport reads a request
// body in its own goroutine, which may still run when the response is
// written, so the count and the error are atomic.
type counter struct {
	r     io.ReadCloser
	count atomic.Int64
	err   atomic.Pointer[error] // the first read error other than EOF
}

func (c *counter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.count.Add(int64(n))
	if err != nil && err != io.EOF {
		c.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (c *counter) n() int64 { return c.count.Load() }

// failed is the error that ended the body before its end, if one did.
func (c *counter) failed() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (c *counter) Close() error { return c.r.Close() }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

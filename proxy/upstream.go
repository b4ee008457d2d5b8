package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"golang.org/x/sys/unix"
)

// upstreamTransport sends the requests agents send most, a replayable
// method without a body (GET, HEAD, OPTIONS, TRACE), in the caller's
// goroutine on connections it keeps itself: write the request, read the
// answer, hand the connection back once its body is read. http.Transport
// does the same with a reader and a writer goroutine per connection, and
// the hand-offs between them and the caller were the largest part of the
// proxy's CPU per keep-alive request after the syscalls themselves
// (docs/performance.md). Every other request (a body, Expect, an upgrade)
// goes through a fallback http.Transport, which can write a body while it
// reads an early answer.
//
// No connection carries two owners' requests (poolOwner): each owner has
// its kept connections and its fallback transport.
type upstreamTransport struct {
	// base is the fallbacks' template: the dialer, TLS configuration and
	// timeouts; its own pool is never used.
	base *http.Transport
	// maxIdle and maxIdlePerHost bound the connections kept; with the
	// fallbacks' they make the maxIdleUpstream that EnsureFDs counts.
	maxIdle, maxIdlePerHost int

	mu        sync.Mutex
	idle      map[poolKey][]*keptConn
	nidle     int
	fallbacks map[poolOwner]*ownedFallback
	uses      uint64 // orders the fallbacks' last use
	closed    bool
}

// poolOwner is whose requests may share an upstream connection: one
// program in one sandbox. An upstream that reads a request's body as the
// start of its next request (a CL.0 or other desync bug) joins whatever
// follows on that connection to it: on a shared connection another
// sandbox's request, with the credentials the proxy injected into it, in
// a request the first sandbox chose the start of. Kept per owner, what a
// program sends can only ever join its own requests.
type poolOwner struct {
	sandbox     policies.Sandbox
	exe, sha256 string
}

// ownerKey carries a request's poolOwner in its context
// (decision.upstreamContext).
type ownerKey struct{}

// poolKey is a kept connection's owner and its scheme://host:port.
type poolKey struct {
	owner  poolOwner
	target string
}

// ownedFallback is one owner's fallback transport and when it was last
// used.
type ownedFallback struct {
	tr   *http.Transport
	used uint64
}

// The fallbacks' share of maxIdleUpstream, and how many owners have one
// at a time: the one used least recently gives way to a new owner, its
// idle connections closed.
const (
	fallbackIdle   = maxIdleUpstream / 4
	maxFallbacks   = 8
	fallbackIdleOf = fallbackIdle / maxFallbacks
)

// newUpstreamTransport keeps fallbackIdle of maxIdleUpstream for the
// fallbacks' requests, the rare ones, and the rest for its own.
func newUpstreamTransport(base *http.Transport) *upstreamTransport {
	base.MaxResponseHeaderBytes = maxResponseHeaderBytes
	return &upstreamTransport{
		base:           base,
		maxIdle:        maxIdleUpstream - fallbackIdle,
		maxIdlePerHost: base.MaxIdleConnsPerHost,
		idle:           map[poolKey][]*keptConn{},
		fallbacks:      map[poolOwner]*ownedFallback{},
	}
}

// withOwner marks ctx's upstream requests as o's.
func withOwner(ctx context.Context, o poolOwner) context.Context {
	return context.WithValue(ctx, ownerKey{}, o)
}

// errNoOwner: a request reached the transport without an owner, which
// only a fault in the proxy can do; it is refused rather than sent on a
// connection anyone may share.
var errNoOwner = errors.New("proxy: upstream request without an owner")

// unusedTransport is goproxy's own, which it never uses (handlePlain
// gives it upstreamTransport for every request): were it reached for, the
// request would fail, not go out on a pool of goproxy's shared by all.
var unusedTransport = &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("proxy: goproxy's own transport is not used")
}}

// fallback is o's fallback transport, made for it if it has none.
func (t *upstreamTransport) fallback(o poolOwner) *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.uses++
	if f := t.fallbacks[o]; f != nil {
		f.used = t.uses
		return f.tr
	}
	if len(t.fallbacks) >= maxFallbacks {
		var oldest poolOwner
		least := uint64(math.MaxUint64)
		for owner, f := range t.fallbacks {
			if f.used < least {
				oldest, least = owner, f.used
			}
		}
		// Its requests still under way finish; http.Transport closes
		// the connections they hand back, as no request comes to
		// undo that (its closeIdle; one that took the transport just
		// before this does, and what it hands back is kept until
		// IdleConnTimeout).
		t.fallbacks[oldest].tr.CloseIdleConnections()
		delete(t.fallbacks, oldest)
	}
	tr := t.base.Clone()
	tr.MaxIdleConns = fallbackIdleOf
	tr.MaxIdleConnsPerHost = fallbackIdleOf
	tr.DisableKeepAlives = t.closed
	t.fallbacks[o] = &ownedFallback{tr: tr, used: t.uses}
	return tr
}

// replayable says whether req may be sent again on a fresh connection when
// a kept one turns out to have been closed by the upstream before it read
// anything (net/http's rule for the same race): no body, and a method
// that changes nothing.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	return (req.Body == nil || req.Body == http.NoBody) && req.Header["Expect"] == nil && req.Header["Upgrade"] == nil
}

// RoundTrip sends req and reads its answer's header; the caller reads and
// closes the body, which hands the connection back.
func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	owner, ok := req.Context().Value(ownerKey{}).(poolOwner)
	if !ok {
		return nil, errNoOwner
	}
	if !replayable(req) {
		return t.fallback(owner).RoundTrip(req)
	}
	key := poolKey{owner, req.URL.Scheme + "://" + req.URL.Host}
	for {
		kc, reused, err := t.get(req.Context(), key, req)
		if err != nil {
			return nil, err
		}
		resp, err := kc.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		kc.close()
		// A kept connection the upstream closed while it was idle fails
		// before a byte of answer: the request never reached anyone. Not
		// a header timeout: that request reached an upstream that is
		// slow to answer, and sent again on the next kept connection it
		// would wait the timeout over, once per connection.
		if !reused || kc.answered || req.Context().Err() != nil || isTimeout(err) {
			return nil, err
		}
	}
}

// CloseIdleConnections closes every kept connection not in use, and from
// then on closes those handed back (Shutdown).
func (t *upstreamTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle, fallbacks := t.idle, t.fallbacks
	t.idle, t.nidle, t.fallbacks, t.closed = map[poolKey][]*keptConn{}, 0, map[poolOwner]*ownedFallback{}, true
	t.mu.Unlock()
	for _, conns := range idle {
		for _, kc := range conns {
			kc.close()
		}
	}
	for _, f := range fallbacks {
		f.tr.CloseIdleConnections()
	}
}

// get is a kept connection to key, the most recently used first (the one
// least likely to have been closed by the upstream's idle timeout), or a
// new one.
func (t *upstreamTransport) get(ctx context.Context, key poolKey, req *http.Request) (kc *keptConn, reused bool, err error) {
	for kc = t.pop(key); kc != nil; kc = t.pop(key) {
		kc.idleTimer.Stop()
		if !kc.spoke() {
			return kc, true, nil
		}
		kc.close()
	}
	kc, err = t.dial(ctx, key, req)
	return kc, false, err
}

// pop takes the most recently kept connection for key, if there is one.
func (t *upstreamTransport) pop(key poolKey) *keptConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[key]
	if len(conns) == 0 {
		return nil
	}
	kc := conns[len(conns)-1]
	conns[len(conns)-1] = nil
	if len(conns) == 1 {
		delete(t.idle, key)
	} else {
		t.idle[key] = conns[:len(conns)-1]
	}
	t.nidle--
	return kc
}

// spoke says whether the upstream sent something, or closed, while kc was
// idle: bytes no request asked for (a 408 before its idle close, a late
// body) would be read as the next request's answer, which may be another
// sandbox's request. Looks that cannot wait: over TLS, a read under a
// deadline already passed, which finds what TLS took off the socket with
// the last answer's records (a later record in the same segment; a read
// past its deadline never reaches the socket, so it finds nothing else,
// and on a bare TCP connection nothing put did not check); then a peek at
// the socket itself. A connection that cannot be peeked at counts as
// spoken, and is not reused. roundTrip sets the read deadline anew.
func (kc *keptConn) spoke() bool {
	nc := kc.conn
	if tc, ok := nc.(*tls.Conn); ok {
		tc.SetReadDeadline(aLongTimeAgo)
		if _, err := kc.br.Peek(1); !isTimeout(err) {
			return true
		}
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	spoke := true
	raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		spoke = err != unix.EAGAIN
	})
	return spoke
}

// dial connects as a fallback would: its dialer (the guard, to the addresses
// checked for this request), its TLS configuration and handshake timeout.
func (t *upstreamTransport) dial(ctx context.Context, key poolKey, req *http.Request) (*keptConn, error) {
	conn, err := t.base.DialContext(ctx, "tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme == "https" {
		cfg := t.base.TLSClientConfig.Clone()
		cfg.ServerName = req.URL.Hostname()
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, t.base.TLSHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", req.URL.Host, err)
		}
		conn = tc
	}
	kc := &keptConn{t: t, key: key, conn: conn}
	kc.counted = &countingReader{r: conn}
	kc.br = bufio.NewReader(kc.counted)
	kc.bw = bufio.NewWriter(conn)
	kc.idleTimer = time.AfterFunc(time.Hour, kc.expire)
	kc.idleTimer.Stop()
	return kc, nil
}

// put keeps kc for the next request to its host, unless the transport is
// closed or holds enough.
func (t *upstreamTransport) put(kc *keptConn) {
	t.mu.Lock()
	if t.closed || t.nidle >= t.maxIdle || len(t.idle[kc.key]) >= t.maxIdlePerHost {
		t.mu.Unlock()
		kc.close()
		return
	}
	t.idle[kc.key] = append(t.idle[kc.key], kc)
	t.nidle++
	kc.idleTimer.Reset(t.base.IdleConnTimeout)
	t.mu.Unlock()
}

// keptConn is one upstream connection and its buffers.
type keptConn struct {
	t         *upstreamTransport
	key       poolKey
	conn      net.Conn
	counted   *countingReader
	br        *bufio.Reader
	bw        *bufio.Writer
	idleTimer *time.Timer
	// answered: some of the current answer was read, so the request
	// reached the upstream and must not be sent again.
	answered bool
}

// aLongTimeAgo is a deadline that has passed: it wakes a blocked read or
// write at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req and reads its answer's header, skipping
// informational answers, within fallback's ResponseHeaderTimeout; req's
// context cancels it.
func (kc *keptConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	kc.answered = false
	// A read deadline (one timer): a bodiless request is a few hundred
	// bytes, which a socket takes without waiting.
	kc.conn.SetReadDeadline(time.Now().Add(kc.t.base.ResponseHeaderTimeout))
	// Registered after the deadline above, which would otherwise undo it.
	stop := context.AfterFunc(ctx, func() { kc.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return nil, err
	}
	if err := req.Write(kc.bw); err != nil {
		return fail(err)
	}
	if err := kc.bw.Flush(); err != nil {
		return fail(err)
	}
	read := kc.counted.n
	var resp *http.Response
	for informational := 0; ; informational++ {
		var err error
		kc.counted.limit = kc.counted.n + int64(kc.br.Buffered()) + maxResponseHeaderBytes
		resp, err = http.ReadResponse(kc.br, req)
		kc.counted.limit = 0
		kc.answered = kc.counted.n > read
		if errors.Is(err, errHeaderTooLarge) {
			err = fmt.Errorf("the response header from %s is larger than %d bytes", req.URL.Host, maxResponseHeaderBytes)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			// The hint an agent reads says which limit it met.
			err = fmt.Errorf("timeout awaiting response headers from %s after %s (--upstream-header-timeout): %w",
				req.URL.Host, kc.t.base.ResponseHeaderTimeout, err)
		}
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if informational == 5 {
			return fail(fmt.Errorf("%s sent more than 5 informational answers", req.URL.Host))
		}
	}
	// The body has no deadline, as with fallback. Cancelled meanwhile,
	// the callback may have run before the clear: cut again.
	kc.conn.SetReadDeadline(time.Time{})
	if ctx.Err() != nil {
		kc.conn.SetDeadline(aLongTimeAgo)
	}
	// Whether the upstream keeps the connection is read now: the caller
	// sets resp.Close for its own client's connection.
	last := resp.Close || resp.StatusCode == http.StatusSwitchingProtocols
	resp.Body = &keptBody{ReadCloser: resp.Body, kc: kc, last: last, stop: stop}
	return resp, nil
}

// expire closes kc once it has been idle for IdleConnTimeout, unless a
// request took it meanwhile.
func (kc *keptConn) expire() {
	t := kc.t
	t.mu.Lock()
	conns := t.idle[kc.key]
	for i, c := range conns {
		if c == kc {
			t.idle[kc.key] = append(conns[:i:i], conns[i+1:]...)
			if len(t.idle[kc.key]) == 0 {
				delete(t.idle, kc.key)
			}
			t.nidle--
			t.mu.Unlock()
			kc.close()
			return
		}
	}
	t.mu.Unlock()
}

func (kc *keptConn) close() {
	kc.idleTimer.Stop()
	kc.conn.Close()
}

// keptBody hands its connection back when it is closed after the whole
// body was read, with nothing more from the upstream waiting; any other
// end closes the connection.
type keptBody struct {
	io.ReadCloser
	kc   *keptConn
	last bool // the upstream ends the connection after this answer
	stop func() bool
	eof  bool
	done bool
}

func (b *keptBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *keptBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if b.ReadCloser == http.NoBody {
		b.eof = true
	}
	// stop reports false once the context's callback has run (or will):
	// the connection's deadline is spoilt.
	stopped := b.stop()
	if !b.eof {
		// net/http's body would read the rest to its end before closing,
		// which for an endless answer to a stalled client is never: the
		// connection goes instead.
		b.kc.close()
		return nil
	}
	err := b.ReadCloser.Close()
	if stopped && err == nil && !b.last && b.kc.br.Buffered() == 0 {
		b.kc.t.put(b.kc)
	} else {
		b.kc.close()
	}
	return err
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
	// limit, when not 0, is the count a read may not go past: a response
	// header is read whole before anything of it is looked at, and an
	// upstream must not grow the proxy's memory at will.
	limit int64
}

// maxResponseHeaderBytes bounds an upstream response's header, on both
// transports: the largest real ones (cookies, CSP) are tens of KiB.
const maxResponseHeaderBytes = 1 << 20

var errHeaderTooLarge = errors.New("response header too large")

func (c *countingReader) Read(p []byte) (int, error) {
	if c.limit != 0 {
		if c.n >= c.limit {
			return 0, errHeaderTooLarge
		}
		p = p[:min(int64(len(p)), c.limit-c.n)]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

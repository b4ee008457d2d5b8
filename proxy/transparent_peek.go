package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// clientFirstWait is how long a transparent connection's client has to say
// something before it is taken for one that waits for the server to speak
// first (SMTP, MySQL, FTP), and decided on host and port alone. Clients
// that speak first (TLS, HTTP, SSH) do so as soon as they are connected;
// a server-first client waits this long more for its upstream's greeting.
const clientFirstWait = time.Second

// maxClientHello bounds what is read for a TLS ClientHello: crypto/tls
// reads a handshake message of up to 64 KiB, in records of up to 16 KiB
// each with its 5-byte header.
const maxClientHello = 64<<10 + 5*(5+256)

// protocol is what a transparent connection's first bytes speak.
type protocol int

const (
	speaksOther protocol = iota // neither below, or nothing yet: decided on host and port
	speaksTLS
	speaksHTTP // an HTTP/1 request line
)

// opening is what a transparent connection's client sent before anything
// was decided: its bytes, to be sent on first, and what they say.
type opening struct {
	proto protocol
	early []byte
	// serverName and protos are the ClientHello's SNI and ALPN list.
	serverName string
	protos     []string
	// greeted is what the upstream sent the client before it spoke
	// (awaitClient), counted in the tunnel's bytes down.
	greeted int64
}

// offersHTTP1 reports whether a TLS client would read an HTTP/1 answer:
// it offered http/1.x by ALPN, or no protocol at all.
func (o opening) offersHTTP1() bool {
	return len(o.protos) == 0 || slices.Contains(o.protos, "http/1.1") || slices.Contains(o.protos, "http/1.0")
}

// peek reads a connection's first bytes, which the client sends on as if
// to its upstream, and tells what they speak, within bounds of size and
// time: a TLS ClientHello (read by crypto/tls), an HTTP/1 request line, or
// anything else, silence included. early is what the client sent already
// (with its CONNECT). The bytes are returned, not consumed: the caller
// sends them first.
func (p *Proxy) peek(c net.Conn, early []byte) (opening, error) {
	defer c.SetReadDeadline(time.Time{})
	pc := p.newPeek(c, early)
	if len(early) == 0 {
		c.SetReadDeadline(time.Now().Add(clientFirstWait))
		if err := pc.fill(); err != nil {
			if isTimeout(err) || errors.Is(err, io.EOF) {
				return opening{}, nil // silent, or done before it said anything
			}
			return opening{}, fmt.Errorf("reading the connection's first bytes: %w", err)
		}
	}
	return p.classify(pc)
}

// awaitClient waits for the first bytes of a client that has said nothing
// yet, relaying what its upstream says meanwhile (a server-first
// protocol's greeting), and tells what they speak: nothing the client
// sends reaches the upstream before that, however long it waits. It ends,
// with end set (the connection is over, not refused), when neither side
// moved for --tunnel-idle-timeout (errIdleTunnel), the client went, or a
// greeting could not be written to it whole. An upstream that ended
// before the client spoke can carry no other host's session: the tunnel
// relays its end (silent opening). err is a first flight that cannot be
// read (a broken ClientHello): a refusal.
func (p *Proxy) awaitClient(client, upstream net.Conn) (first opening, end, err error) {
	idle := p.cfg.Limits.TunnelIdleTimeout
	var (
		greeted  int64
		writeErr error
		// upEnd is how the upstream ended before the client spoke:
		// io.EOF, or an error (a reset).
		upEnd error
		// stopped is set before the relay ends the client's read (a
		// deadline in the past), which a re-armed deadline must not undo.
		stopped atomic.Bool
		// moved is when the upstream last said something, as time since
		// start: a chunk costs a clock read, not a deadline's reset.
		moved atomic.Int64
	)
	start := time.Now()
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		// Taken for every tunnel whose client waits for its 200 (most
		// TLS clients), whose upstream then says nothing: pooled, and
		// small. An upstream that fills it is streaming (a server-first
		// download), and reads as the relay loop does until a read would
		// not have filled the small one.
		small := greetBufs.Get().(*[]byte)
		defer greetBufs.Put(small)
		var big *[]byte
		defer func() {
			if big != nil {
				streamBufs.Put(big)
			}
		}()
		buf := *small
		stop := func() {
			stopped.Store(true)
			client.SetReadDeadline(aLongTimeAgo)
		}
		for {
			n, rerr := upstream.Read(buf)
			if n > 0 {
				// The upstream moved; so has the client once the write
				// is done. A client that takes less than a read's worth
				// in the idle limit is taken for one that reads nothing.
				moved.Store(int64(time.Since(start)))
				w, werr := client.Write(buf[:n])
				greeted += int64(w)
				if werr != nil {
					// Written in part, the rest would leave a hole in
					// the client's stream: the connection ends.
					writeErr = fmt.Errorf("client write: %w", werr)
					stop()
					return
				}
				moved.Store(int64(time.Since(start)))
			}
			switch {
			case big == nil && n == len(buf):
				big = streamBufs.Get().(*[]byte)
				buf = *big
			case big != nil && n < len(*small):
				streamBufs.Put(big)
				big, buf = nil, *small
			}
			if rerr != nil {
				// A deadline's error is awaitClient's own stop; any
				// other (a reset, a keepalive's timeout) is the end.
				if !errors.Is(rerr, os.ErrDeadlineExceeded) {
					upEnd = rerr
					stop()
				}
				return
			}
		}
	}()
	pc := p.newPeek(client, nil)
	client.SetReadDeadline(start.Add(idle))
	var ferr error
	for {
		if ferr = pc.fill(); !errors.Is(ferr, os.ErrDeadlineExceeded) || stopped.Load() {
			break
		}
		// Idle only if the upstream has not moved either.
		last := start.Add(time.Duration(moved.Load()))
		if time.Since(last) >= idle {
			break
		}
		client.SetReadDeadline(last.Add(idle))
		if stopped.Load() { // the relay ended before the deadline was re-armed
			client.SetReadDeadline(aLongTimeAgo)
		}
	}
	upstream.SetReadDeadline(aLongTimeAgo) // the relay's read ends now
	// And its write, to a client that reads none of it: at once when the
	// wait ended as idle, else after the idle limit.
	idled := errors.Is(ferr, os.ErrDeadlineExceeded) && !stopped.Load()
	if idled {
		client.SetWriteDeadline(aLongTimeAgo)
	} else {
		client.SetWriteDeadline(time.Now().Add(idle))
	}
	<-relayed
	upstream.SetReadDeadline(time.Time{})
	client.SetReadDeadline(time.Time{})
	client.SetWriteDeadline(time.Time{})
	first.greeted = greeted
	switch {
	case idled:
		return first, errIdleTunnel, nil
	case writeErr != nil:
		return first, writeErr, nil
	case upEnd != nil && !errors.Is(upEnd, io.EOF):
		// Passed on as an end, a reset would read as the whole stream
		// to a protocol without framing: the client is reset too.
		return first, &upstreamAbort{upEnd}, nil
	case ferr == nil:
		first, err = p.classify(pc)
		client.SetReadDeadline(time.Time{}) // classify's, as peek clears it
		first.greeted = greeted
		return first, nil, err
	case upEnd != nil && errors.Is(ferr, os.ErrDeadlineExceeded), errors.Is(ferr, io.EOF):
		return first, nil, nil // the relay carries the end on
	}
	return first, fmt.Errorf("client: %w", ferr), nil
}

// upstreamAbort is awaitClient's end when the upstream failed (a reset, a
// keepalive's timeout) before the client spoke.
type upstreamAbort struct{ err error }

func (e *upstreamAbort) Error() string { return "upstream: " + e.err.Error() }
func (e *upstreamAbort) Unwrap() error { return e.err }

// streamBufs are what awaitClient reads into from an upstream that
// streams before its client speaks, as large as the relay loop's reads.
// With 16 KiB reads and a deadline reset after each, a download to a
// client that never speaks (the bench's raw bulk) ran at 1,171 MB/s; with
// these, 2,068.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// greetBufs are awaitClient's buffers for what an upstream says first.
var greetBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

func (p *Proxy) newPeek(c net.Conn, early []byte) *peekConn {
	// Clipped: appended to, early (a view of the server's read buffer)
	// is copied rather than written past.
	return &peekConn{Conn: c, max: p.cfg.Limits.MaxHeaderBytes + 4096, seen: slices.Clip(early)}
}

// classify tells what the bytes seen so far (at least one) begin, reading
// more as it needs within bounds of size and time.
func (p *Proxy) classify(pc *peekConn) (opening, error) {
	c := pc.Conn
	if isTLSRecord(pc.seen[0]) {
		c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HandshakeTimeout))
		pc.max = maxClientHello
		return pc.clientHello()
	}
	c.SetReadDeadline(time.Now().Add(p.cfg.Limits.ReadHeaderTimeout))
	if err := refuseSSL2Hello(pc); err != nil {
		return opening{}, err
	}
	for {
		switch requestLine(pc.seen) {
		case lineIs:
			return opening{proto: speaksHTTP, early: pc.seen}, nil
		case lineIsNot:
			return opening{early: pc.seen}, nil
		}
		if err := pc.fill(); err != nil {
			// A beginning that could be a request line, then silence,
			// the end, or too much: read as HTTP, which refuses it,
			// never tunnelled past the Host pin (a request sent a byte
			// at a time).
			if isTimeout(err) || errors.Is(err, io.EOF) || errors.Is(err, errPeekLimit) {
				return opening{proto: speaksHTTP, early: pc.seen}, nil
			}
			return opening{}, fmt.Errorf("reading the connection's first bytes: %w", err)
		}
	}
}

// silent says the client sent nothing before peek's wait ran out.
func (o opening) silent() bool { return len(o.early) == 0 }

// isTLSRecord says whether b begins a record a TLS server reads before
// the ClientHello: handshake (0x16), or an alert (0x15), which crypto/tls
// (and so a Go front) skips, reading the ClientHello after it. Either is
// read as TLS, its ClientHello found as the upstream would find it, or the
// connection refused. No server takes another record type first, and
// other protocols may begin with those bytes (a length's low byte).
func isTLSRecord(b byte) bool { return b == recordAlert || b == recordHandshake }

// refuseSSL2Hello refuses what an OpenSSL server reads as an SSL
// 2.0-compatible ClientHello, reading up to its fixed fields. That hello
// carries no server name, so to a name a shared front that takes it
// (OpenSSL at a low security level) serves its default host; crypto/tls
// cannot read it, so it cannot be checked as a ClientHello, and RFC 8446
// (D.5) has no client send it. Only a beginning whose every field so far
// is one OpenSSL accepts (ssl2Hello) is read on, and, whole, refused:
// other protocols begin with a high bit and a 1 (Thrift's compact calls,
// msgpack-rpc, CBOR, telnet's IAC DO ECHO). One that could still become
// such a hello, then silence or the end, is refused too, as a request line
// is: a client that waits could send the rest once relayed.
func refuseSSL2Hello(pc *peekConn) error {
	for ssl2Hello(pc.seen) && len(pc.seen) < ssl2HelloHead {
		if err := pc.fill(); err != nil {
			return fmt.Errorf("the connection's first bytes could still be an SSL 2.0-compatible ClientHello: %w", err)
		}
	}
	if ssl2Hello(pc.seen) {
		return errors.New("an SSL 2.0-compatible ClientHello, which carries no TLS server name")
	}
	return nil
}

// ssl2HelloHead is an SSL 2.0-compatible ClientHello's fixed part: a
// 2-byte header with its high bit set, message type 1, a 3.x version, and
// the lengths of its cipher specs, session id and challenge.
const ssl2HelloHead = 11

// ssl2Hello says whether b could begin an SSL 2.0-compatible ClientHello
// as OpenSSL reads one: every field of its head that b holds is one it
// accepts (version 3.x; cipher specs of 3 bytes each; a session id of at
// most 32 bytes; a challenge of any length, of which OpenSSL keeps 32; the
// header's length theirs).
func ssl2Hello(b []byte) bool {
	field := func(i int) int { return int(b[i])<<8 | int(b[i+1]) }
	switch {
	case len(b) >= 1 && b[0]&0x80 == 0,
		len(b) >= 3 && b[2] != 1,
		len(b) >= 4 && b[3] != 3:
		return false
	case len(b) < ssl2HelloHead:
		return true
	}
	specs, session, challenge := field(5), field(7), field(9)
	return specs > 0 && specs%3 == 0 && session <= 32 && field(0)&0x7fff == 9+specs+session+challenge
}

// errHelloRead stops crypto/tls's handshake once the ClientHello is read.
var errHelloRead = errors.New("ClientHello read")

// clientHello has crypto/tls read the ClientHello from what was seen
// (from off: what a server would skip before it is skipped) and what
// follows, and stops its handshake there; nothing reaches the client.
func (pc *peekConn) clientHello() (opening, error) {
	var hello *tls.ClientHelloInfo
	err := tls.Server(pc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errHelloRead
	}}).Handshake()
	if hello == nil {
		return opening{}, fmt.Errorf("the connection began as TLS, and no ClientHello could be read from it: %v", err)
	}
	return opening{proto: speaksTLS, early: pc.seen, serverName: hello.ServerName, protos: hello.SupportedProtos}, nil
}

var errPeekLimit = errors.New("first bytes over the peek limit")

// peekConn records what is read from a connection, up to max bytes, so
// that it can be read again (off, rewound) and then sent on. Writes are
// dropped: while the proxy only looks, nothing reaches the client (the
// alert crypto/tls sends when its handshake is stopped).
type peekConn struct {
	net.Conn
	seen []byte
	off  int // what the current reader has read of seen
	max  int
}

// fill reads once more from the connection into seen.
func (pc *peekConn) fill() error {
	if len(pc.seen) >= pc.max {
		return errPeekLimit
	}
	// Straight into seen's spare room: no buffer per read to copy from.
	k := len(pc.seen)
	pc.seen = slices.Grow(pc.seen, min(pc.max-k, 4096))
	n, err := pc.Conn.Read(pc.seen[k:cap(pc.seen)][:min(pc.max-k, 4096)])
	pc.seen = pc.seen[:k+n]
	if n > 0 {
		return nil
	}
	return err
}

func (pc *peekConn) Read(b []byte) (int, error) {
	if pc.off == len(pc.seen) {
		if err := pc.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(b, pc.seen[pc.off:])
	pc.off += n
	return n, nil
}

func (pc *peekConn) Write(b []byte) (int, error) { return len(b), nil }

// A verdict on whether bytes begin with an HTTP/1 request line.
const (
	lineIsNot = iota
	lineMayBe // so far, yes: more bytes decide
	lineIs
)

// requestLine tells whether b begins with an HTTP request line, or may
// once more bytes come: a method token, white space, then a target that
// is a path ("/", "*", "http://...") or "HTTP/" (any case) before the line
// ends. It reads loosely on purpose, as servers do (nginx takes two
// spaces, a trailing one, any 1.x version; Tomcat a tab, as RFC 9112 3
// allows; nginx an HTTP/0.9 "GET /", with no version and so no Host): what
// may be a request is read as one, by net/http (serveRequests), which
// refuses what it cannot read whole; only what cannot be one is tunnelled.
// An SSH banner ("SSH-2.0-OpenSSH_9.6 Ubuntu\r\n") or a binary protocol is
// not one. White space before it is skipped, as a server may skip blank
// lines (RFC 9112 2.2).
func requestLine(b []byte) int {
	b = bytes.TrimLeft(b, httpSpace+"\n")
	if len(b) == 0 {
		return lineMayBe
	}
	i := 0
	for i < len(b) && httpguts.IsTokenRune(rune(b[i])) {
		i++
	}
	switch {
	case i == len(b):
		return lineMayBe
	case i == 0 || strings.IndexByte(httpSpace, b[i]) < 0:
		return lineIsNot
	}
	line := b[i:]
	ended := false
	if end := bytes.IndexByte(line, '\n'); end >= 0 {
		line, ended = line[:end], true
	}
	if gitPacket(b[:i]) {
		// Git's only with its NUL on the first line, which no HTTP
		// server takes in a request line ("0000git-x /admin HTTP/1.1"
		// is a request to net/http).
		switch nul := bytes.IndexByte(line, 0); {
		case nul >= 0 && bytes.IndexByte(line[:nul], '\r') < 0:
			return lineIsNot
		case nul < 0 && !ended && bytes.IndexByte(line, '\r') < 0:
			return lineMayBe
		}
	}
	if target := bytes.TrimLeft(line, httpSpace); len(target) > 0 {
		if target[0] == '/' || target[0] == '*' || hasPrefixFold(target, "http://") || hasPrefixFold(target, "https://") {
			return lineIs
		}
	}
	for j := range line {
		if hasPrefixFold(line[j:], "HTTP/") {
			return lineIs
		}
	}
	if ended {
		return lineIsNot // the line ended with neither
	}
	// Its end not read yet: "HTTP/" may still be cut at the edge.
	return lineMayBe
}

// gitPacket says whether a first word may be git's protocol (git://): a
// pkt-line's four hex digits of length, then the service
// ("0033git-upload-pack /project.git\x00host=..."), whose path would
// otherwise read as a request's.
func gitPacket(word []byte) bool {
	if len(word) < 8 || !bytes.HasPrefix(word[4:], []byte("git-")) {
		return false
	}
	for _, c := range word[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// httpSpace is the white space servers take between a request line's
// words.
const httpSpace = " \t\v\f\r"

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

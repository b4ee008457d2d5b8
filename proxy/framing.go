package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock/policies"
)

// framing is how a request header, as the client sent it, frames its body.
type framing struct {
	// why says how peers may read the framing differently, or is "".
	// RFC 9112 6.1: a message with both Content-Length and
	// Transfer-Encoding "ought to be handled as an error", and a server
	// that goes on "MUST close the connection after responding"; so must
	// an HTTP/1.0 message with a Transfer-Encoding. net/http instead
	// drops the Content-Length, reads the body chunked and keeps the
	// connection, so the client and the proxy may disagree on where the
	// next request starts. A Transfer-Encoding or Content-Length folded
	// over lines (obs-fold) is refused too: net/http joins the lines,
	// other parsers cut them.
	why string
	// invalid: net/http refuses the framing itself (and closes).
	invalid bool
	chunked bool
	length  int64 // Content-Length; 0 when there is none
	connect bool
}

// parseFraming reads the framing of a raw request header.
func parseFraming(header []byte) (f framing) {
	first, rest, _ := bytes.Cut(header, []byte("\n"))
	first = bytes.TrimRight(first, "\r")
	http10 := bytes.HasSuffix(first, []byte(" HTTP/1.0"))
	f.connect = bytes.HasPrefix(first, []byte("CONNECT "))
	var cls, tes [][]byte
	var prev []byte // the name of the field on the previous line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimRight(line, "\r")
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if isFramingField(prev) && f.why == "" {
				f.why = string(prev) + " folded over lines (obs-fold)"
			}
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		prev = bytes.TrimSpace(name)
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(prev, []byte("Content-Length")):
			cls = append(cls, value)
		case bytes.EqualFold(prev, []byte("Transfer-Encoding")):
			tes = append(tes, value)
		}
	}
	switch {
	case f.why != "":
	case len(cls) > 0 && len(tes) > 0:
		f.why = "request has both Content-Length and Transfer-Encoding (RFC 9112 6.1)"
	case len(tes) > 0 && http10:
		f.why = "HTTP/1.0 request has a Transfer-Encoding (RFC 9112 6.1)"
	}
	// As net/http frames it: one Transfer-Encoding, chunked; or
	// Content-Lengths that agree.
	switch {
	case len(tes) > 1 || (len(tes) == 1 && !bytes.EqualFold(tes[0], []byte("chunked"))):
		f.invalid = true
	case len(tes) == 1:
		f.chunked = true
	case len(cls) > 0:
		n, err := strconv.ParseUint(string(cls[0]), 10, 63)
		for _, v := range cls[1:] {
			f.invalid = f.invalid || !bytes.Equal(v, cls[0])
		}
		f.invalid = f.invalid || err != nil
		f.length = int64(n)
	}
	return f
}

// framingError says why a request header's framing cannot be trusted, or
// returns "".
func framingError(header []byte) string { return parseFraming(header).why }

func isFramingField(name []byte) bool {
	return bytes.EqualFold(name, []byte("Content-Length")) || bytes.EqualFold(name, []byte("Transfer-Encoding"))
}

// headerTap records the bytes a request header is read from, so that
// framingError sees them as sent: net/http removes Transfer-Encoding and
// Content-Length from what it parses. It sits under the bufio.Reader the
// header is read through and records only while a header is read.
type headerTap struct {
	r   io.Reader
	on  bool
	buf []byte
}

func (t *headerTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if t.on {
		t.buf = append(t.buf, p[:n]...)
	}
	return n, err
}

// readRequest reads a request from br, which reads through t, and returns
// the raw header it was parsed from besides.
func (t *headerTap) readRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	ahead, _ := br.Peek(br.Buffered())
	t.buf = append(t.buf[:0], ahead...)
	t.on = true
	req, err := http.ReadRequest(br)
	t.on = false
	// What br still holds came after the header.
	return req, t.buf[:len(t.buf)-br.Buffered()], err
}

// badBody turns dc into a 400 invalid_request when the client's request
// body could not be read (malformed chunks, or cut short): the upstream
// request failed because of the client, not the upstream.
func badBody(dc *decision, body *counter) bool {
	err := body.failed()
	if err == nil {
		return false
	}
	detail := "malformed request body: " + err.Error()
	var stalled *bodyStalledError
	if errors.As(err, &stalled) {
		detail = stalled.Error()
	}
	dc.deny(policies.ReasonInvalidRequest, detail)
	dc.serverStatus = http.StatusBadRequest
	return true
}

// malformed is a refusal of a request whose framing cannot be trusted: a
// 400, after which the connection is closed.
func (p *Proxy) malformed(cc *clientConn, req policies.Request, detail string) *decision {
	return p.unreadable(cc, req, http.StatusBadRequest, detail)
}

// unreadable is a refusal of a request the proxy cannot read, answered
// with the status an HTTP server answers it (status), unless the
// connection was refused before (its identity): that refusal stands.
func (p *Proxy) unreadable(cc *clientConn, req policies.Request, status int, detail string) *decision {
	dc := p.refused(cc, req, policies.ReasonInvalidRequest, detail)
	if dc.d.Reason == policies.ReasonInvalidRequest {
		dc.serverStatus = status
	}
	return dc
}

// frameTracker follows the request stream of a plain connection as
// http.Server reads it, so that the raw header of each request can be
// checked by framingError: http.Server parses headers itself and removes
// what the check needs. It reads nothing: the connection's Read feeds it
// what the server reads, and it tells headers from bodies by the same
// framing the server uses (Content-Length, chunked). The server's handler
// takes each header's verdict in order (next). Once it cannot follow the
// stream (a header too large, framing the server refuses too, a takeover
// after CONNECT or a protocol switch) it stops, and next refuses.
type frameTracker struct {
	maxHeader int

	// Fed from the server's reads, one at a time.
	state   trackState
	hdr     []byte // the header being read
	lineLen int    // bytes of the current line so far
	left    int64  // body or chunk bytes still to come
	line    []byte // a chunk-size line being read

	mu       sync.Mutex
	verdicts []string // framingError of each header not yet taken
}

type trackState int

const (
	inHeader    trackState = iota
	inBody                 // Content-Length bytes
	inChunkSize            // a chunk-size line
	inChunk                // chunk data
	inChunkEnd             // the CRLF after chunk data
	inTrailer              // trailer fields, up to an empty line
	stopped
)

func (t *frameTracker) feed(b []byte) {
	for len(b) > 0 && t.state != stopped {
		switch t.state {
		case inHeader:
			b = t.header(b)
		case inBody, inChunk:
			n := min(t.left, int64(len(b)))
			b, t.left = b[n:], t.left-n
			if t.left > 0 {
				break
			}
			if t.state == inBody {
				t.state = inHeader
			} else {
				t.state = inChunkEnd
			}
		case inChunkSize, inChunkEnd, inTrailer:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				t.line = append(t.line, b...)
				b = nil
				if len(t.line) > 4096 {
					t.stop()
				}
				break
			}
			line := bytes.TrimSuffix(append(t.line, b[:i]...), []byte("\r"))
			b, t.line = b[i+1:], t.line[:0]
			t.chunkLine(line)
		}
	}
}

// header reads header bytes from b up to the empty line that ends the
// header, and returns the rest.
func (t *frameTracker) header(b []byte) []byte {
	if len(t.hdr) == 0 {
		// net/http skips empty lines before a request line.
		for len(b) > 0 && (b[0] == '\r' || b[0] == '\n') {
			b = b[1:]
		}
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.hdr = append(t.hdr, b...)
			t.lineLen += len(b)
			b = nil
			break
		}
		t.hdr = append(t.hdr, b[:i+1]...)
		b = b[i+1:]
		n := t.lineLen + i
		t.lineLen = 0
		if n == 0 || (n == 1 && t.hdr[len(t.hdr)-2] == '\r') {
			t.endHeader()
			return b
		}
	}
	if len(t.hdr) > t.maxHeader {
		t.stop() // the server refuses it too
	}
	return b
}

// endHeader records the verdict on the header just read and follows its
// body.
func (t *frameTracker) endHeader() {
	f := parseFraming(t.hdr)
	t.hdr = t.hdr[:0]
	t.mu.Lock()
	t.verdicts = append(t.verdicts, f.why)
	t.mu.Unlock()
	switch {
	case f.why != "" || f.invalid || f.connect:
		// The handler refuses it, or the server does, or what follows
		// is a tunnel: the stream ends here as HTTP.
		t.stop()
	case f.chunked:
		t.state = inChunkSize
	case f.length > 0:
		t.state, t.left = inBody, f.length
	}
}

// chunkLine handles one line of a chunked body (without its CRLF).
func (t *frameTracker) chunkLine(line []byte) {
	switch t.state {
	case inChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			t.stop() // the server fails the body: the connection closes
		case n == 0:
			t.state = inTrailer
		default:
			t.state, t.left = inChunk, n
		}
	case inChunkEnd:
		if len(line) != 0 {
			t.stop()
			return
		}
		t.state = inChunkSize
	case inTrailer:
		if len(line) == 0 {
			t.state = inHeader
		}
	}
}

// stop ends the tracking: headers from now on are not seen.
func (t *frameTracker) stop() { t.state = stopped }

// next is the framing verdict on the next request the server hands its
// handler: framingError's, or, when the tracker lost the stream, a
// refusal (the request cannot be checked).
func (t *frameTracker) next() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.verdicts) == 0 {
		// The server read a header the tracker did not follow.
		return "request framing could not be followed on this connection"
	}
	why := t.verdicts[0]
	t.verdicts = t.verdicts[1:]
	return why
}

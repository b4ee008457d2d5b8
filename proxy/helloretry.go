package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// helloRetryRandom is the random of a ServerHello that is a
// HelloRetryRequest (RFC 8446 4.1.3).
var helloRetryRandom = [32]byte{
	0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
	0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
}

// changeCipherSpec is the record a TLS 1.3 client in middlebox
// compatibility mode sends before its second ClientHello (RFC 8446 D.4),
// which crypto/tls, reading a first one, would refuse.
var changeCipherSpec = []byte{0x14, 0x03, 0x03, 0x00, 0x01, 0x01}

const (
	recordChangeCipherSpec = 0x14
	recordAlert            = 0x15
	recordHandshake        = 0x16
	alertWarning           = 1
	typeServerHello        = 2
	// maxRecord is the longest record crypto/tls reads.
	maxRecord = 16<<10 + 2048
	// serverHelloHead is as much of a ServerHello as tells a
	// HelloRetryRequest: type and length, legacy_version, random.
	serverHelloHead = 4 + 2 + 32
)

// helloRetry sends a TLS tunnel's opening (first) on and keeps the tunnel
// out of the relay until the clear-text part of its handshake is over. A
// server picks its certificate, or a shared front its backend, by the
// ClientHello it acts on, which after a HelloRetryRequest is a second one
// (RFC 8446 4.1.4): RFC 8446 keeps its server name, but OpenSSL fronts
// (nginx, HAProxy) route on it, so a first ClientHello naming the tunnel's
// host and a second naming another would reach that other host decided as
// this one. So only the ClientHello goes on at first, what the client sent
// after it held back; the upstream's answer is read up to its ServerHello's
// random (a HelloRetryRequest whole) and passed on; when it asks for
// another ClientHello, the client's next one is read as the server reads
// it (after the first, past a ChangeCipherSpec) and must carry the first
// one's server name byte for byte (host_mismatch; the first's was checked
// against the host) before it goes on. An answer that is no TLS a client could read ends the tunnel
// (upstream_error): the client's handshake could not complete, and what it
// sent next would be relayed unlooked at to whatever the upstream is. up
// and down are what it passed on; false: dc has ended (a denial, or detail
// set), and the caller records it and resets the client.
//
// Without a retry, as nearly always, it costs the tunnel the upstream's
// first read in the netpoller (one read that finds nothing, a wake-up)
// where the relay loop would have made it, four deadline updates, and a
// walk over the ClientHello's record headers.
func (p *Proxy) helloRetry(client, upstream net.Conn, first opening, dc *decision) (up, down int64, ok bool) {
	deadline := time.Now().Add(p.cfg.Limits.HandshakeTimeout)
	client.SetDeadline(deadline)
	upstream.SetDeadline(deadline)
	defer func() {
		client.SetDeadline(time.Time{})
		upstream.SetDeadline(time.Time{})
	}()
	buf := greetBufs.Get().(*[]byte)
	defer greetBufs.Put(buf)
	held := first.early
	for retried := false; ; retried = true {
		end, err := helloEnd(held)
		if err != nil {
			dc.deny(policies.ReasonInvalidRequest, err.Error())
			return up, down, false
		}
		k, err := upstream.Write(held[:end])
		if up += int64(k); err != nil {
			dc.detail = "upstream write: " + err.Error()
			return up, down, false
		}
		held = held[end:]
		n, retry, err := serverHello(upstream, *buf)
		if err == nil && retry && retried {
			err = errors.New("a second HelloRetryRequest, which RFC 8446 forbids")
		}
		if err != nil {
			dc.deny(policies.ReasonUpstreamError, "the upstream's answer to the TLS ClientHello: "+err.Error())
			return up, down, false
		}
		k, err = client.Write((*buf)[:n])
		if down += int64(k); err != nil {
			dc.detail = "client write: " + err.Error()
			return up, down, false
		}
		if !retry {
			k, err = upstream.Write(held)
			if up += int64(k); err != nil {
				dc.detail = "upstream write: " + err.Error()
				return up, down, false
			}
			return up, down, true
		}
		second, after, err := p.secondHello(client, held)
		if err != nil && gaveUp(after, err) {
			dc.detail = "the client ended its TLS handshake after a HelloRetryRequest: " + err.Error()
			return up, down, false
		}
		if err != nil {
			dc.deny(policies.ReasonInvalidRequest, "after a HelloRetryRequest: "+err.Error())
			return up, down, false
		}
		if second.serverName != first.serverName {
			dc.deny(policies.ReasonHostMismatch, fmt.Sprintf("TLS server name %q in the ClientHello after a HelloRetryRequest, %q in the first, in a tunnel to %s",
				second.serverName, first.serverName, dc.in.Request.Host))
			return up, down, false
		}
		held = second.early
	}
}

// serverHello reads the upstream's answer to a ClientHello into buf, up to
// its ServerHello's random, and says whether it is a HelloRetryRequest; n
// is what was read, all of it the client's. A HelloRetryRequest is read
// on to the end of the record its last byte is in: the client answers
// only once it has all of it, and what stayed in the upstream's socket
// would wait there while the proxy waited for that answer. A fatal alert
// first ends the handshake, and is no retry. What is no ServerHello in TLS
// records, or does not come whole within buf, is an error.
func serverHello(upstream io.Reader, buf []byte) (n int, retry bool, err error) {
	var head [serverHelloHead]byte
	want := len(head)
	for {
		got, end, _, fatal, err := firstHandshake(buf[:n], want, head[:])
		switch {
		case err != nil:
			return n, false, err
		case fatal:
			return n, false, nil
		case retry && got == want && end <= n:
			return n, true, nil
		case !retry && got == len(head) && head[0] != typeServerHello:
			return n, false, fmt.Errorf("a handshake message of type %d, not a ServerHello", head[0])
		case !retry && got == len(head) && [32]byte(head[6:]) != helloRetryRandom:
			return n, false, nil
		case !retry && got == len(head):
			retry, want = true, 4+(int(head[1])<<16|int(head[2])<<8|int(head[3]))
			continue
		case n == len(buf) && retry:
			return n, false, fmt.Errorf("a HelloRetryRequest of %d bytes, not whole in the first %d bytes", want, n)
		case n == len(buf):
			return n, false, fmt.Errorf("no ServerHello in its first %d bytes", n)
		}
		k, err := upstream.Read(buf[n:])
		if n += k; k == 0 && err != nil {
			return n, false, err
		}
	}
}

// secondHello reads the ClientHello a client sends after a
// HelloRetryRequest as the server reads it: what the client sent after the
// first one (held, which the upstream does not have yet), then its
// socket, past one ChangeCipherSpec. Its early bytes are all of them;
// after is what was read, for gaveUp when there is no ClientHello.
func (p *Proxy) secondHello(client net.Conn, held []byte) (_ opening, after []byte, _ error) {
	pc := p.newPeek(client, held)
	pc.max = maxClientHello
	for len(pc.seen) < len(changeCipherSpec) && bytes.HasPrefix(changeCipherSpec, pc.seen) {
		if err := pc.fill(); err != nil {
			return opening{}, pc.seen, fmt.Errorf("reading the second ClientHello: %w", err)
		}
	}
	if bytes.HasPrefix(pc.seen, changeCipherSpec) {
		pc.off = len(changeCipherSpec)
	}
	o, err := pc.clientHello()
	return o, pc.seen, err
}

// gaveUp says whether a client that sent no second ClientHello ended its
// handshake rather than broke it: a fatal alert (no key share the server
// takes, as a client offering one group answers a HelloRetryRequest), or
// nothing but a ChangeCipherSpec and warnings before it closed or the
// handshake's time ran out. Its tunnel ends, and the close line says so
// with no denial: the client was not refused, it left.
func gaveUp(after []byte, err error) bool {
	got, _, _, fatal, ferr := firstHandshake(after, 1, nil)
	return ferr == nil && (fatal || got == 0 && !errors.Is(err, errPeekLimit))
}

// helloEnd is the offset in b, a ClientHello crypto/tls read (after a
// ChangeCipherSpec, for a second one) and what the client sent after it,
// just past the ClientHello's last record. A record that carries more
// handshake bytes after it is refused: a server could read its next
// ClientHello there, never looked at, or the bytes are held back from a
// message it is reading.
func helloEnd(b []byte) (int, error) {
	var hdr [4]byte
	if got, _, _, _, err := firstHandshake(b, len(hdr), hdr[:]); err != nil || got < len(hdr) {
		return 0, fmt.Errorf("the TLS ClientHello cannot be found again: %v", err)
	}
	size := len(hdr) + (int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3]))
	got, end, rest, _, err := firstHandshake(b, size, nil)
	switch {
	case err != nil || got < size:
		return 0, fmt.Errorf("the TLS ClientHello cannot be found again: %v", err)
	case rest > 0:
		return 0, errors.New("the TLS ClientHello's record carries more handshake bytes after it")
	}
	return end, nil
}

// firstHandshake walks the TLS records at the head of b to the first
// handshake message, past the alert records a peer may send before it
// (crypto/tls, client and server, skips a warning one) and
// ChangeCipherSpec records (before a second ClientHello), counting up to
// want of its bytes and copying the first of them to head. got is how many
// it counted (fewer than want: b ends first); fatal says a fatal alert came
// first, which ends the handshake; end is the offset just past the record
// the want-th byte is in (past b's end when b ends within that record),
// and rest how many of that record's bytes follow that byte. err: b is not what a peer reads there.
func firstHandshake(b []byte, want int, head []byte) (got, end, rest int, fatal bool, err error) {
	for off := 0; off+5 <= len(b); {
		typ, length := b[off], int(b[off+3])<<8|int(b[off+4])
		if b[off+1] != 3 || length > maxRecord {
			return got, 0, 0, false, fmt.Errorf("bytes that are no TLS record (% x)", b[off:off+5])
		}
		body := b[off+5:]
		body = body[:min(len(body), length)]
		switch {
		case typ == recordChangeCipherSpec && got == 0 && length == 1:
		case typ == recordAlert && got == 0 && length == 2:
			if len(body) < 2 {
				return got, 0, 0, false, nil
			}
			if body[0] != alertWarning {
				return got, 0, 0, true, nil
			}
		case typ == recordHandshake:
			k := min(len(body), want-got)
			if got < len(head) {
				copy(head[got:], body[:k])
			}
			if got += k; got == want {
				return got, off + 5 + length, length - k, false, nil
			}
			if len(body) < length {
				return got, 0, 0, false, nil
			}
		default:
			return got, 0, 0, false, fmt.Errorf("a TLS record of type %d where a handshake message begins", typ)
		}
		off += 5 + length
	}
	return got, 0, 0, false, nil
}

package proxy

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// refuseOpened answers dc's denial of a connection in the client's own
// protocol, as its first bytes (first) tell, where it can read one, and
// records it. A TLS
// client that would read HTTP/1 (ALPN http/1.1, or none) completes its
// handshake with a leaf from the airlock CA, which sandboxed clients trust,
// and reads the 403 (or 421, 502, ...) with the JSON body; a plain HTTP
// client reads it as it is; any other client (TLS for h2 only, SSH, a
// database) is reset, for it could show nothing better. The audit line
// carries the reason either way.
func (p *Proxy) refuseOpened(c net.Conn, first opening, dc *decision) {
	switch {
	case first.proto == speaksHTTP:
		p.refuseConn(c, dc, nil)
	case first.proto == speaksTLS && first.offersHTTP1():
		p.refuseInTLS(withEarly(c, first.early), first, dc)
	default:
		p.record(dc, 0, 0, 0)
		reset(c)
	}
}

// refuseInTLS completes the client's handshake and answers the denial
// inside it. The leaf names what the client asked for, its server name
// (the host otherwise): a leaf for another name would fail its check, and
// it would see a certificate error instead of the reason. A server name
// that is no host name (a wildcard, a spelling the canonicaliser refuses)
// gets no leaf, which the CA would sign for whatever a client sends: the
// connection is reset.
func (p *Proxy) refuseInTLS(c net.Conn, first opening, dc *decision) {
	name := dc.in.Request.Host
	if first.serverName != "" {
		var err error
		if name, err = policies.CanonicalHost(first.serverName); err != nil {
			dc.detail = strings.TrimPrefix(dc.detail+"; the denial could not be answered: no certificate is made for the TLS server name "+strconv.Quote(first.serverName)+": "+err.Error(), "; ")
			p.record(dc, 0, 0, 0)
			reset(c)
			return
		}
	}
	tc, err := p.serverTLS(c, name)
	if err != nil {
		dc.detail = strings.TrimPrefix(dc.detail+"; the denial could not be answered: "+err.Error(), "; ")
		p.record(dc, 0, 0, 0)
		reset(c)
		return
	}
	// The request first, for as long as a refusal lingers: answered
	// before it has sent one, an HTTP client takes the answer for an
	// unsolicited one (Go's: "Unsolicited response received on idle HTTP
	// channel") and reports that instead of the reason.
	tc.SetReadDeadline(time.Now().Add(refuseLinger))
	http.ReadRequest(bufio.NewReader(tc))
	tc.SetReadDeadline(time.Time{})
	resp := dc.denialResponse(nil)
	resp.Close = true
	writeResponse(bufio.NewWriter(tc), resp)
	p.record(dc, resp.StatusCode, 0, 0)
	closeAnswered(tc)
}

package fakedns

import (
	"net"
	"time"

	"github.com/miekg/dns"
)

// MaxInFlight bounds the UDP queries one socket answers at once. miekg/dns
// starts a goroutine per packet read, with no limit of its own: a flood
// answered more slowly than it arrives (an audit sink that lags) would
// grow the proxy's goroutines and memory without bound. At the bound the
// socket is not read until an answer is done, so the kernel's receive
// buffer drops the excess, as at any DNS server under a flood. A stub
// resolver asks for a few names at a time: the bound is never near.
const MaxInFlight = 128

// gate is one UDP socket's bound: a token is taken before a packet is read
// and given back when miekg/dns is done with it. Every packet read ends in
// exactly one of the hooks that give it back: the handler (ServeDNS), the
// accept check when it does not accept the header (miekg/dns answers or
// drops it itself), or the invalid-message hook (too short, or its body
// cannot be unpacked: answered FORMERR without the handler).
type gate struct {
	tokens chan struct{}
}

func newGate() *gate { return &gate{tokens: make(chan struct{}, MaxInFlight)} }

func (g *gate) take() { g.tokens <- struct{}{} }
func (g *gate) give() { <-g.tokens }

// reader wraps miekg/dns's reader (dns.Server.DecorateReader) so that no
// packet is read while the gate is full. A shutdown waits for the answers
// in flight (miekg/dns does so too), after which the read is let through
// and fails on the deadline the shutdown set.
func (g *gate) reader(r dns.Reader) dns.Reader {
	return &gatedReader{PacketConnReader: r.(dns.PacketConnReader), g: g}
}

type gatedReader struct {
	dns.PacketConnReader
	g *gate
}

func (r *gatedReader) ReadUDP(c *net.UDPConn, timeout time.Duration) ([]byte, *dns.SessionUDP, error) {
	r.g.take()
	m, s, err := r.PacketConnReader.ReadUDP(c, timeout)
	if err != nil {
		r.g.give() // nothing read, nothing to answer
	}
	return m, s, err
}

func (r *gatedReader) ReadPacketConn(c net.PacketConn, timeout time.Duration) ([]byte, net.Addr, error) {
	r.g.take()
	m, a, err := r.PacketConnReader.ReadPacketConn(c, timeout)
	if err != nil {
		r.g.give()
	}
	return m, a, err
}

// gatedHandler answers a gated socket's queries and gives their tokens
// back.
type gatedHandler struct {
	s *Server
	g *gate
}

func (h gatedHandler) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	defer h.g.give()
	h.s.ServeDNS(w, req)
}

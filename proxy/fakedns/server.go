package fakedns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/netutil"
)

// ServerConfig configures a Server. Pool is required.
type ServerConfig struct {
	Pool *Pool
	// Reachable reports whether any rule could reach a canonical host;
	// names it rejects get NXDOMAIN. nil: every name gets an address
	// (each connection is still decided).
	Reachable func(host string) bool
	// Refused is called with every refusal (NXDOMAIN, REFUSED, SERVFAIL) before it
	// is sent. Its error sends SERVFAIL instead: a refusal that cannot be
	// put on record is not given (the proxy's audit rule).
	Refused func(Refusal) error
	// Answered is told the rcode ("NOERROR", "NXDOMAIN", ...) of every
	// reply sent (metrics), those to malformed queries included.
	Answered func(rcode string)
}

// Server answers A and AAAA queries from a Pool, over UDP and TCP (a stub
// resolver retries over TCP when an answer comes truncated). It never
// forwards a query.
type Server struct {
	pool      *Pool
	reachable func(string) bool
	refused   func(Refusal) error
	answered  func(string)
	ttl       uint32

	mu      sync.Mutex
	closed  bool
	running []*served
}

// served is one socket's miekg/dns server.
type served struct {
	srv     *dns.Server
	started chan struct{} // serving: ShutdownContext may be called
	done    chan struct{} // ActivateAndServe returned
	stop    sync.Once
}

// MaxStreams bounds the TCP connections one listener serves at once; more
// wait in its backlog. Each holds a descriptor and a goroutine of the
// proxy for up to miekg/dns's idle timeout, and a stub resolver needs one
// at a time: without a bound a sandbox could exhaust the proxy's
// descriptors, which every sandbox shares.
const MaxStreams = 64

// streamLife bounds a TCP connection's life, whatever it sends: miekg/dns
// waits up to its idle timeout for each next query, up to 128 of them, and
// clients that each ask one now and then would hold every one of the
// MaxStreams slots for as long as they liked. A variable for tests.
var streamLife = 10 * time.Second

// lifeListener gives each connection streamLife: no deadline set on it
// reaches past its end.
type lifeListener struct{ net.Listener }

func (l lifeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &lifeConn{Conn: c, end: time.Now().Add(streamLife)}
	lc.SetDeadline(time.Time{})
	return lc, nil
}

type lifeConn struct {
	net.Conn
	end time.Time
}

func (c *lifeConn) clamp(t time.Time) time.Time {
	if t.IsZero() || t.After(c.end) {
		return c.end
	}
	return t
}

func (c *lifeConn) SetDeadline(t time.Time) error     { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *lifeConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *lifeConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// ErrServerClosed is Serve's error once Shutdown has been called.
var ErrServerClosed = errors.New("fakedns: server closed")

// NewServer checks c and builds a Server.
func NewServer(c ServerConfig) (*Server, error) {
	if c.Pool == nil {
		return nil, errors.New("fakedns: a server needs a pool")
	}
	return &Server{pool: c.Pool, reachable: c.Reachable, refused: c.Refused, answered: c.Answered, ttl: answerTTL(c.Pool.ttl)}, nil
}

// ServeDNS answers one query (dns.Handler).
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m, refusal := s.answer(req)
	if refusal != nil && s.refused != nil {
		if err := s.refused(*refusal); err != nil {
			m = new(dns.Msg)
			m.SetRcode(req, dns.RcodeServerFailure)
		}
	}
	s.count(m.Rcode)
	w.WriteMsg(m) // a client gone is nothing to act on
}

// Serve answers queries on packets (UDP) and streams (TCP) until Shutdown,
// and then returns nil. It closes them all when it returns. Should one of
// them fail, the others are stopped and its error returned: a sandbox
// whose resolver answers on one transport only would fail oddly.
func (s *Server) Serve(packets []net.PacketConn, streams []net.Listener) error {
	if len(packets)+len(streams) == 0 {
		return errors.New("fakedns: nothing to serve on")
	}
	var all []*served
	for _, pc := range packets {
		all = append(all, s.newGated(pc))
	}
	for _, ln := range streams {
		all = append(all, s.newServed(&dns.Server{Listener: lifeListener{netutil.LimitListener(ln, MaxStreams)}}))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, sv := range all {
			sv.close()
		}
		return ErrServerClosed
	}
	s.running = append(s.running, all...)
	s.mu.Unlock()

	errc := make(chan error, len(all))
	for _, sv := range all {
		go func() {
			err := sv.srv.ActivateAndServe()
			close(sv.done)
			if err != nil {
				err = fmt.Errorf("fakedns: serving on %s: %w", sv.addr(), err)
			}
			errc <- err
		}()
	}
	var first error
	for range all {
		if err := <-errc; err != nil && first == nil {
			first = err
			for _, sv := range all {
				go sv.shutdown(context.Background())
			}
		}
	}
	return first
}

func (s *Server) count(rcode int) {
	if s.answered != nil {
		s.answered(dns.RcodeToString[rcode])
	}
}

// accept is miekg/dns's own check of a query's header, counting the
// replies it sends without asking the handler.
func (s *Server) accept(dh dns.Header) dns.MsgAcceptAction {
	a := dns.DefaultMsgAcceptFunc(dh)
	switch a {
	case dns.MsgReject:
		s.count(dns.RcodeFormatError)
	case dns.MsgRejectNotImplemented:
		s.count(dns.RcodeNotImplemented)
	}
	return a
}

func (s *Server) newServed(srv *dns.Server) *served {
	sv := &served{srv: srv, started: make(chan struct{}), done: make(chan struct{})}
	srv.Handler = s
	srv.MsgAcceptFunc = s.accept
	srv.MsgInvalidFunc = s.invalid
	srv.NotifyStartedFunc = func() { close(sv.started) }
	return sv
}

// invalid counts the FORMERR miekg/dns answers, without the handler, to a
// message whose header it read and whose body it could not (a compression
// pointer to itself); one too short for a header goes unanswered.
func (s *Server) invalid(m []byte, _ error) {
	if len(m) >= dnsHeaderLen {
		s.count(dns.RcodeFormatError)
	}
}

// dnsHeaderLen is a DNS message header's size (RFC 1035, 4.1.1).
const dnsHeaderLen = 12

// newGated serves pc with at most MaxInFlight answers at once (gate).
func (s *Server) newGated(pc net.PacketConn) *served {
	g := newGate()
	sv := s.newServed(&dns.Server{PacketConn: pc, DecorateReader: g.reader})
	sv.srv.Handler = gatedHandler{s: s, g: g}
	sv.srv.MsgAcceptFunc = func(dh dns.Header) dns.MsgAcceptAction {
		a := s.accept(dh)
		if a != dns.MsgAccept {
			g.give() // answered or dropped by miekg/dns, not the handler
		}
		return a
	}
	sv.srv.MsgInvalidFunc = func(m []byte, err error) { g.give(); s.invalid(m, err) }
	return sv
}

func (sv *served) close() {
	if sv.srv.PacketConn != nil {
		sv.srv.PacketConn.Close()
	} else {
		sv.srv.Listener.Close()
	}
}

func (sv *served) addr() string {
	if sv.srv.PacketConn != nil {
		return "udp " + sv.srv.PacketConn.LocalAddr().String()
	}
	return "tcp " + sv.srv.Listener.Addr().String()
}

// shutdown stops sv once it serves; one whose ActivateAndServe failed, or
// has not begun, needs none (Serve checks closed before starting it).
func (sv *served) shutdown(ctx context.Context) (err error) {
	sv.stop.Do(func() {
		select {
		case <-sv.started:
			err = sv.srv.ShutdownContext(ctx)
		case <-sv.done:
		case <-ctx.Done():
			// Not begun in time: its socket is closed, so it cannot
			// begin later, unstoppable.
			sv.close()
			err = ctx.Err()
		}
	})
	return err
}

// Shutdown stops every Serve: no new query is read, answers in flight are
// sent until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	running := s.running
	s.running = nil
	s.mu.Unlock()
	var errs []error
	for _, sv := range running {
		errs = append(errs, sv.shutdown(ctx))
	}
	return errors.Join(errs...)
}

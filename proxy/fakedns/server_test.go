package fakedns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/miekg/dns"
)

// dnsFixture is a Server on loopback UDP and TCP, recording what it
// reports.
type dnsFixture struct {
	pool     *Pool
	srv      *Server
	udp, tcp string

	mu       sync.Mutex
	refusals []Refusal
	rcodes   []string
	failAll  error // Refused's error
}

func newDNSFixture(t testing.TB) *dnsFixture {
	t.Helper()
	return newDNSFixtureWith(t, PoolConfig{})
}

func newDNSFixtureWith(t testing.TB, c PoolConfig) *dnsFixture {
	t.Helper()
	pool, err := NewPool(c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Max != 0 {
		unmetered(pool) // a small pool, for what follows from running out of it
	}
	fx := &dnsFixture{pool: pool}
	fx.srv, err = NewServer(ServerConfig{
		Pool:      pool,
		Reachable: func(host string) bool { return host == "api.allowed.test" || strings.HasSuffix(host, ".wild.test") },
		Refused: func(r Refusal) error {
			fx.mu.Lock()
			defer fx.mu.Unlock()
			fx.refusals = append(fx.refusals, r)
			return fx.failAll
		},
		Answered: func(rcode string) {
			fx.mu.Lock()
			defer fx.mu.Unlock()
			fx.rcodes = append(fx.rcodes, rcode)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fx.udp, fx.tcp = pc.LocalAddr().String(), ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- fx.srv.Serve([]net.PacketConn{pc}, []net.Listener{ln}) }()
	t.Cleanup(func() {
		if err := fx.srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve after Shutdown = %v; want nil", err)
		}
	})
	return fx
}

func (fx *dnsFixture) ask(t testing.TB, network, name string, qtype, qclass uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.Question[0].Qclass = qclass
	addr := fx.udp
	if network == "tcp" {
		addr = fx.tcp
	}
	r, _, err := (&dns.Client{Net: network}).Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s query %s %s: %v", network, dns.Type(qtype), name, err)
	}
	if r.Id != q.Id || len(r.Question) != 1 || r.Question[0].Name != name {
		t.Fatalf("%s query %s %s: reply %v does not answer it", network, dns.Type(qtype), name, r)
	}
	return r
}

func (fx *dnsFixture) lastRefusal() (Refusal, bool) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if len(fx.refusals) == 0 {
		return Refusal{}, false
	}
	return fx.refusals[len(fx.refusals)-1], true
}

func TestServerAnswersAddresses(t *testing.T) {
	fx := newDNSFixture(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name  string // as asked
			canon string
			qtype uint16
		}{
			{"api.allowed.test.", "api.allowed.test", dns.TypeA},
			{"api.allowed.test.", "api.allowed.test", dns.TypeAAAA},
			{"API.Allowed.TEST.", "api.allowed.test", dns.TypeA}, // 0x20 case: echoed, answered as canonical
			{"x.y.wild.test.", "x.y.wild.test", dns.TypeAAAA},
		} {
			r := fx.ask(t, network, tc.name, tc.qtype, dns.ClassINET)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !r.Response || !r.RecursionAvailable {
				t.Errorf("%s %s %s: reply %v; want NOERROR with one answer", network, dns.Type(tc.qtype), tc.name, r)
				continue
			}
			h := r.Answer[0].Header()
			if h.Name != tc.name || h.Rrtype != tc.qtype || h.Class != dns.ClassINET || h.Ttl != answerTTL(DefaultTTL) {
				t.Errorf("%s %s %s: answer header %+v; want the name as asked, TTL %d", network, dns.Type(tc.qtype), tc.name, h, answerTTL(DefaultTTL))
			}
			var ip net.IP
			switch rr := r.Answer[0].(type) {
			case *dns.A:
				ip = rr.A
			case *dns.AAAA:
				ip = rr.AAAA
			}
			a, _ := netip.AddrFromSlice(ip)
			if want := mustAddr(t, fx.pool, tc.canon, tc.qtype == dns.TypeAAAA); a.Unmap() != want {
				t.Errorf("%s %s %s: answer %s; want the pool's %s", network, dns.Type(tc.qtype), tc.name, a, want)
			}
			if name, _ := fx.pool.Name(a); name != tc.canon {
				t.Errorf("%s %s %s: Name(%s) = %q; want %q", network, dns.Type(tc.qtype), tc.name, a, name, tc.canon)
			}
		}
	}
	if _, refused := fx.lastRefusal(); refused {
		t.Errorf("an answered query was reported as a refusal")
	}
	if answerTTL(DefaultTTL) >= uint32(DefaultTTL.Seconds()/2) {
		t.Errorf("answer TTL %d s is not well under the pool's %v", answerTTL(DefaultTTL), DefaultTTL)
	}
}

func TestServerRefuses(t *testing.T) {
	fx := newDNSFixture(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name          string
			qtype, qclass uint16
			rcode         int
			reason        policies.Reason
			refusedName   string
			detail        string
		}{
			{"api.allowed.test.", dns.TypeTXT, dns.ClassINET, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "api.allowed.test", "query type TXT"},
			{"blocked.test.", dns.TypeMX, dns.ClassINET, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "blocked.test", "query type MX"},
			{"api.allowed.test.", dns.TypeANY, dns.ClassINET, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "api.allowed.test", "query type ANY"},
			{"api.allowed.test.", dns.TypeHTTPS, dns.ClassINET, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "api.allowed.test", "query type HTTPS"},
			{"1.0.18.198.in-addr.arpa.", dns.TypePTR, dns.ClassINET, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "1.0.18.198.in-addr.arpa", "query type PTR"},
			{"version.bind.", dns.TypeTXT, dns.ClassCHAOS, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "version.bind", "query class CH"},
			{"api.allowed.test.", dns.TypeA, dns.ClassCHAOS, dns.RcodeRefused, policies.ReasonDNSQueryRefused, "api.allowed.test", "query class CH"},
			{"blocked.test.", dns.TypeA, dns.ClassINET, dns.RcodeNameError, policies.ReasonHostNotAllowed, "blocked.test", "no rule"},
			{"wild.test.", dns.TypeAAAA, dns.ClassINET, dns.RcodeNameError, policies.ReasonHostNotAllowed, "wild.test", "no rule"},
			{`a\.b.wild.test.`, dns.TypeA, dns.ClassINET, dns.RcodeRefused, policies.ReasonInvalidRequest, `a\.b.wild.test`, "contains"},
			{"*.wild.test.", dns.TypeA, dns.ClassINET, dns.RcodeRefused, policies.ReasonInvalidRequest, "*.wild.test", "not a letter"},
			{".", dns.TypeA, dns.ClassINET, dns.RcodeRefused, policies.ReasonInvalidRequest, "", "empty host"},
		} {
			r := fx.ask(t, network, tc.name, tc.qtype, tc.qclass)
			if r.Rcode != tc.rcode || len(r.Answer)+len(r.Ns)+len(r.Extra) != 0 {
				t.Errorf("%s %s %s: reply %v; want %s and nothing else", network, dns.Type(tc.qtype), tc.name, r, dns.RcodeToString[tc.rcode])
			}
			got, ok := fx.lastRefusal()
			want := Refusal{Name: tc.refusedName, QType: dns.Type(tc.qtype).String(), Rcode: dns.RcodeToString[tc.rcode], Reason: tc.reason}
			if got.Detail = ""; !ok || got != want {
				t.Errorf("%s %s %s: refusal %+v; want %+v", network, dns.Type(tc.qtype), tc.name, got, want)
			}
			if got, _ := fx.lastRefusal(); !strings.Contains(got.Detail, tc.detail) {
				t.Errorf("%s %s %s: refusal detail %q; want it to say %q", network, dns.Type(tc.qtype), tc.name, got.Detail, tc.detail)
			}
		}
	}
	if n := fx.pool.len(); n != 0 {
		t.Errorf("%d names remembered after refusals only; want 0", n)
	}
}

// A refusal that cannot be reported is not given: SERVFAIL instead.
func TestServerRefusalUnreportedIsServfail(t *testing.T) {
	fx := newDNSFixture(t)
	fx.mu.Lock()
	fx.failAll = errors.New("audit log write failed")
	fx.mu.Unlock()
	for _, network := range []string{"udp", "tcp"} {
		if r := fx.ask(t, network, "blocked.test.", dns.TypeA, dns.ClassINET); r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: NXDOMAIN unreported answered %s; want SERVFAIL", network, dns.RcodeToString[r.Rcode])
		}
		if r := fx.ask(t, network, "api.allowed.test.", dns.TypeA, dns.ClassINET); r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s: an address (nothing to report) answered %s; want NOERROR", network, dns.RcodeToString[r.Rcode])
		}
	}
}

// A name the pool has no address for gets SERVFAIL, reported with the
// reason: fail closed rather than reuse an address a client may hold.
func TestServerPoolExhaustedIsServfail(t *testing.T) {
	fx := newDNSFixtureWith(t, PoolConfig{V4: netip.MustParsePrefix("10.9.0.0/29"), Max: 3})
	for i := range 6 { // the pool's six addresses, three names forgotten
		name := string(rune('a'+i)) + ".wild.test."
		if r := fx.ask(t, "udp", name, dns.TypeA, dns.ClassINET); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s = %s; want NOERROR", name, dns.RcodeToString[r.Rcode])
		}
	}
	if r := fx.ask(t, "udp", "g.wild.test.", dns.TypeA, dns.ClassINET); r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Fatalf("g.wild.test with the pool exhausted = %v; want SERVFAIL", r)
	}
	got, ok := fx.lastRefusal()
	if !ok || got.Name != "g.wild.test" || got.Rcode != "SERVFAIL" || got.Reason != policies.ReasonDNSPoolExhausted ||
		!strings.Contains(got.Detail, "exhausted") {
		t.Errorf("reported %+v; want g.wild.test, SERVFAIL, dns_pool_exhausted, a detail saying the pool is exhausted", got)
	}
}

// Every reply is counted by rcode, those miekg/dns sends itself to a
// malformed query included.
func TestServerCountsAnswers(t *testing.T) {
	fx := newDNSFixture(t)
	fx.ask(t, "udp", "api.allowed.test.", dns.TypeA, dns.ClassINET)
	fx.ask(t, "tcp", "blocked.test.", dns.TypeA, dns.ClassINET)
	fx.ask(t, "udp", "api.allowed.test.", dns.TypeTXT, dns.ClassINET)
	two := new(dns.Msg)
	two.SetQuestion("api.allowed.test.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	r, _, err := new(dns.Client).Exchange(two, fx.udp)
	if err != nil || r.Rcode != dns.RcodeFormatError {
		t.Fatalf("two questions: %v, %v; want FORMERR", r, err)
	}
	// A header miekg/dns reads and a body it cannot (the question's name
	// a compression pointer to itself): its FORMERR, which miekg/dns
	// writes without the handler, is counted too, on both transports.
	loop := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1}
	for _, network := range []string{"udp", "tcp"} {
		addr := map[string]string{"udp": fx.udp, "tcp": fx.tcp}[network]
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		co := &dns.Conn{Conn: c}
		co.Write(loop)
		r, err := co.ReadMsg()
		c.Close()
		if err != nil || r.Rcode != dns.RcodeFormatError {
			t.Fatalf("%s: a name pointing to itself: %v, %v; want FORMERR", network, r, err)
		}
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if want := []string{"NOERROR", "NXDOMAIN", "REFUSED", "FORMERR", "FORMERR", "FORMERR"}; !slices.Equal(fx.rcodes, want) {
		t.Errorf("answers counted %v; want %v", fx.rcodes, want)
	}
}

// An answer to a long name stays within the 512 bytes of a UDP answer to
// a query without EDNS: the name is written once, pointed to after.
func TestServerLongNameFitsUDP(t *testing.T) {
	fx := newDNSFixture(t)
	label := strings.Repeat("a", 60)
	name := label + "." + label + "." + label + "." + label[:50] + ".wild.test."
	c, err := net.Dial("udp", fx.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	q, _ := new(dns.Msg).SetQuestion(name, dns.TypeAAAA).Pack()
	c.Write(q)
	raw := make([]byte, 4096)
	n, err := c.Read(raw)
	if err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(raw[:n]); err != nil || r.Rcode != dns.RcodeSuccess || r.Truncated || len(r.Answer) != 1 {
		t.Fatalf("%s: %v, %v; want one answer, not truncated", name, r, err)
	}
	if n > 512 {
		t.Errorf("the answer to a %d-byte name is %d bytes; want at most 512", len(name), n)
	}
}

func TestServerShutdown(t *testing.T) {
	pool, _ := NewPool(PoolConfig{})
	srv, _ := NewServer(ServerConfig{Pool: pool})
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve([]net.PacketConn{pc}, nil) }()
	q := new(dns.Msg)
	q.SetQuestion("a.test.", dns.TypeA)
	if r, _, err := new(dns.Client).Exchange(q, pc.LocalAddr().String()); err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("query: %v, %v", r, err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown = %v; want nil", err)
	}
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the socket after Shutdown: %v; want it closed", err)
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(nil, []net.Listener{ln}); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v; want ErrServerClosed", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a listener given after Shutdown: Accept = %v; want it closed", err)
	}
}

// A sandbox cannot hold more than MaxStreams TCP connections of the
// answerer: the next waits, and is served once one closes.
func TestServerLimitsStreams(t *testing.T) {
	fx := newDNSFixture(t)
	c := &dns.Client{Net: "tcp"}
	q := new(dns.Msg).SetQuestion("api.allowed.test.", dns.TypeA)
	var held []*dns.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	for range MaxStreams {
		conn, err := c.Dial(fx.tcp)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		if _, _, err := c.ExchangeWithConn(q, conn); err != nil { // accepted, served, kept open
			t.Fatal(err)
		}
	}
	extra, err := c.Dial(fx.tcp) // the kernel's backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := extra.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	// Over the limit the query is not read: the read can only time out
	// (a slow machine cannot make this fail, only a missing limit).
	extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if r, err := extra.ReadMsg(); err == nil {
		t.Fatalf("connection %d was served (%v); want it to wait", MaxStreams+1, r.Rcode)
	}
	held[0].Close()
	extra.SetReadDeadline(time.Time{})
	if r, err := extra.ReadMsg(); err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("connection %d after one closed: %v, %v; want it served", MaxStreams+1, r, err)
	}
}

// A TCP connection is served for a bounded time, however often it asks:
// slow askers cannot hold the stream slots for as long as they like.
func TestServerStreamsEnd(t *testing.T) {
	defer func(l time.Duration) { streamLife = l }(streamLife)
	streamLife = 500 * time.Millisecond
	fx := newDNSFixture(t)
	c := &dns.Client{Net: "tcp"}
	conn, err := c.Dial(fx.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q := new(dns.Msg).SetQuestion("api.allowed.test.", dns.TypeA)
	start := time.Now()
	// 60 queries at most: miekg/dns ends a connection after 128.
	for time.Since(start) < 3*time.Second {
		if _, _, err := c.ExchangeWithConn(q, conn); err != nil {
			return // ended by the server
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("a connection asking every 50ms was still served after 3s (its life is %v)", streamLife)
}

// A message that ends after its header, which says one question, is a
// format error on record: miekg/dns hands it over with no question, and
// indexing one crashed the proxy serving every sandbox. The answerer goes
// on answering.
func TestServerHeaderOnlyQuery(t *testing.T) {
	fx := newDNSFixture(t)
	// id 0x1234, RD, QDCOUNT 1, nothing after the 12-byte header.
	header := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, network := range []string{"udp", "tcp"} {
		addr := fx.udp
		if network == "tcp" {
			addr = fx.tcp
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		co := &dns.Conn{Conn: c}
		if _, err := co.Write(header); err != nil {
			t.Fatal(err)
		}
		r, err := co.ReadMsg()
		c.Close()
		if err != nil || r.Id != 0x1234 || r.Rcode != dns.RcodeFormatError {
			t.Fatalf("%s: reply %v, %v; want FORMERR for id 0x1234", network, r, err)
		}
		if ref, ok := fx.lastRefusal(); !ok || ref.Rcode != "FORMERR" || ref.Reason != policies.ReasonDNSQueryRefused {
			t.Errorf("%s: refusal %+v; want FORMERR dns_query_refused on record", network, ref)
		}
		if r := fx.ask(t, network, "api.allowed.test.", dns.TypeA, dns.ClassINET); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: after the header-only message: %v", network, r)
		}
	}
}

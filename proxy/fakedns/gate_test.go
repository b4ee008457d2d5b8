package fakedns

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// gatedFixture serves UDP on loopback with a Refused that blocks until
// release is closed: an audit writer that lags behind a flood.
func gatedFixture(t *testing.T) (pc net.PacketConn, blocked *atomic.Int64, release chan struct{}) {
	t.Helper()
	pool, err := NewPool(PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	blocked, release = new(atomic.Int64), make(chan struct{})
	srv, err := NewServer(ServerConfig{Pool: pool, Refused: func(Refusal) error {
		blocked.Add(1)
		<-release
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if pc, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve([]net.PacketConn{pc}, nil) }()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		if t.Failed() {
			return // a gate that leaks never lets Serve end
		}
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve after Shutdown = %v; want nil", err)
		}
	})
	return pc, blocked, release
}

// unread is the size of the first datagram waiting in pc's receive buffer
// (SIOCINQ), 0 when none waits.
func unread(t *testing.T, pc net.PacketConn) int {
	t.Helper()
	rc, err := pc.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatalf("ioctl(SIOCINQ): %v", ierr)
	}
	return n
}

func packed(t *testing.T, name string, qtype uint16) []byte {
	t.Helper()
	b, err := new(dns.Msg).SetQuestion(name, qtype).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A flood of refused queries answered more slowly than it comes holds at
// most MaxInFlight answers: then the socket is not read, the rest waits in
// its buffer (the kernel drops what does not fit), and the proxy's
// goroutines do not grow with the flood. Once the answers go out, the
// server reads and answers again.
func TestServerBoundsAnswersInFlight(t *testing.T) {
	before := runtime.NumGoroutine()
	pc, blocked, release := gatedFixture(t)
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	txt := packed(t, "flood.test.", dns.TypeTXT)
	// Flood until the server stops reading: its gate full, a packet
	// waiting unread. Without the gate every packet read is one more
	// goroutine blocked in Refused.
	for sent := 0; blocked.Load() < MaxInFlight || unread(t, pc) == 0; sent++ {
		if n := blocked.Load(); n > MaxInFlight {
			t.Fatalf("%d answers in flight after %d queries; want at most MaxInFlight = %d", n, sent, MaxInFlight)
		}
		c.Write(txt) // the kernel may drop it: a flood
		runtime.Gosched()
	}
	for range 10 * MaxInFlight {
		c.Write(txt)
	}
	if n := blocked.Load(); n != MaxInFlight {
		t.Errorf("%d answers in flight after the flood; want MaxInFlight = %d", n, MaxInFlight)
	}
	if n := runtime.NumGoroutine() - before; n > MaxInFlight+16 {
		t.Errorf("%d goroutines more under a flood; want about MaxInFlight = %d", n, MaxInFlight)
	}
	close(release)
	for unread(t, pc) > 0 { // the flood read and answered: room for a query
		runtime.Gosched()
	}
	r, _, err := new(dns.Client).Exchange(new(dns.Msg).SetQuestion("after.test.", dns.TypeA), pc.LocalAddr().String())
	if err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("a query after the flood was answered: %v, %v; want NOERROR", r, err)
	}
}

// Every packet read gives its place in the gate back, those miekg/dns
// answers or drops without the handler included: after more than
// MaxInFlight of each kind a query is still answered.
func TestServerGateGivesBackUnhandled(t *testing.T) {
	pc, _, _ := gatedFixture(t)
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A leak shows as a query never read: fail rather than hang.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	a := packed(t, "a.test.", dns.TypeA)
	response := append([]byte(nil), a...)
	response[2] |= 0x80 // QR: a response, dropped
	two := new(dns.Msg).SetQuestion("a.test.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	twoq, err := two.Pack() // two questions: FORMERR by miekg/dns's accept check
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		pkt  []byte
	}{
		{"too short for a header", a[:5]},
		{"a response", response},
		{"two questions", twoq},
		{"a body that does not unpack", a[:len(a)-3]},
	} {
		for range MaxInFlight + 1 {
			if _, err := c.Write(tc.pkt); err != nil {
				t.Fatal(err)
			}
			// One at a time: a flood would be dropped by the kernel
			// and prove nothing. Each is answered or dropped before
			// the next is read only if the gate let it through.
			if _, err := c.Write(a); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("after %s: %v", tc.kind, err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil {
				t.Fatal(err)
			}
			if r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 {
				continue
			}
			// The reply to the malformed packet itself (FORMERR): the
			// answer to the query follows.
			if n, err = c.Read(buf); err != nil {
				t.Fatalf("after %s: %v", tc.kind, err)
			}
		}
	}
}

package relay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// relayed is a client and a server whose connections meet in a pair:
// client ⇄ a | relay | b ⇄ server, as a tunnel's are.
func relayed(t testing.TB, ls *Loops) (client, server *net.TCPConn, p *Pair) {
	t.Helper()
	client, a := tcpPair(t)
	b, server := tcpPair(t)
	p, err := ls.Relay(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return client, server, p
}

func startLoops(t testing.TB) *Loops {
	t.Helper()
	ls, err := Start(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Stop)
	return ls
}

func wait(t testing.TB, p *Pair) Result {
	t.Helper()
	select {
	case <-p.Done():
		return p.Result()
	case <-time.After(30 * time.Second):
		t.Fatal("the pair never ended")
		return Result{}
	}
}

// Bytes go both ways, whole and in order, however slowly a side reads
// (a slow reader makes the relay hold what it read); each side's EOF
// reaches the other as a half-close, and the pair ends clean once both
// have, counting what it moved.
func TestRelayCopiesBothWaysAndPassesHalfCloses(t *testing.T) {
	ls := startLoops(t)
	for _, tc := range []struct {
		name       string
		up, down   int
		slowClient bool
		// clientFirst: the client half-closes before the server
		// answers, so the server's socket hangs up (its FIN, and the
		// client's passed on) while what it sent still waits for the
		// slow client.
		clientFirst bool
	}{
		{"small", 5, 7, false, false},
		{"bulk", 8 << 20, 32 << 20, false, false},
		{"slow client", 1, 4 << 20, true, false},
		{"slow client after both FINs", 1, 4 << 20, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server, p := relayed(t, ls)
			upData, downData := bytes.Repeat([]byte("u"), tc.up), make([]byte, tc.down)
			for i := range downData {
				downData[i] = byte(i * 7)
			}
			got := make(chan []byte, 1)
			go func() { // the server: read everything, then answer
				b, _ := io.ReadAll(server)
				got <- b
			}()
			go func() {
				client.Write(upData)
				client.CloseWrite()
			}()
			go func() {
				if tc.clientFirst {
					<-got
					got <- upData // read: what it checks below
				}
				server.Write(downData)
				server.CloseWrite()
			}()
			if tc.slowClient {
				// The server's bytes (and FIN) reach the relay, which
				// holds what the client's socket cannot take.
				time.Sleep(200 * time.Millisecond)
			}
			down, err := io.ReadAll(client)
			if err != nil || sha256.Sum256(down) != sha256.Sum256(downData) {
				t.Fatalf("the client read %d bytes (%v); want the server's %d", len(down), err, len(downData))
			}
			if up := <-got; !bytes.Equal(up, upData) {
				t.Fatalf("the server read %d bytes; want the client's %d", len(up), len(upData))
			}
			r := wait(t, p)
			if r.Err != nil || r.AToB != int64(tc.up) || r.BToA != int64(tc.down) {
				t.Fatalf("result %+v; want %d up, %d down, no error", r, tc.up, tc.down)
			}
		})
	}
}

// A pair ends, its sockets closed, when a side resets, when it is aborted
// (the idle watch, the proxy's shutdown) and when the loops stop.
func TestRelayEnds(t *testing.T) {
	aborted := errors.New("aborted")
	for _, tc := range []struct {
		name string
		end  func(ls *Loops, server *net.TCPConn, p *Pair)
		want func(error) bool
	}{
		{"server resets", func(_ *Loops, server *net.TCPConn, _ *Pair) {
			server.SetLinger(0)
			server.Close()
		}, func(err error) bool { return err != nil }},
		{"aborted", func(_ *Loops, _ *net.TCPConn, p *Pair) { p.Abort(aborted) },
			func(err error) bool { return err == aborted }},
		{"loops stop", func(ls *Loops, _ *net.TCPConn, _ *Pair) { ls.Stop() },
			func(err error) bool { return err == ErrStopped }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := startLoops(t)
			client, server, p := relayed(t, ls)
			client.Write([]byte("hello"))
			buf := make([]byte, 5)
			if _, err := io.ReadFull(server, buf); err != nil {
				t.Fatal(err)
			}
			tc.end(ls, server, p)
			if r := wait(t, p); !tc.want(r.Err) || r.AToB != 5 {
				t.Fatalf("result %+v", r)
			}
			client.SetReadDeadline(time.Now().Add(10 * time.Second))
			var ne net.Error
			if n, err := client.Read(buf); n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("the client read %d, %v; want its connection closed", n, err)
			}
		})
	}
	t.Run("relay after stop", func(t *testing.T) {
		ls := startLoops(t)
		ls.Stop()
		a, _ := tcpPair(t)
		b, _ := tcpPair(t)
		for range 100 { // the stop is queued: Relay sees it once it has run
			if _, err := ls.Relay(a, b); err == ErrStopped {
				return
			}
			a, _ = tcpPair(t)
			b, _ = tcpPair(t)
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("Relay after Stop never said ErrStopped")
	})
}

// IdleFor counts from the last data either way.
func TestRelayIdleFor(t *testing.T) {
	ls := startLoops(t)
	client, server, p := relayed(t, ls)
	time.Sleep(50 * time.Millisecond)
	if idle := p.IdleFor(); idle < 50*time.Millisecond {
		t.Fatalf("idle %v after 50 ms of silence", idle)
	}
	client.Write([]byte("x"))
	io.ReadFull(server, make([]byte, 1))
	if idle := p.IdleFor(); idle >= 50*time.Millisecond {
		t.Fatalf("idle %v right after data", idle)
	}
}

// BenchmarkRelayRoundTrip is one 1 KiB request and reply through a pair:
// the small exchanges most tunnels carry (an HTTPS keep-alive request's).
func BenchmarkRelayRoundTrip(b *testing.B) {
	client, server, _ := relayed(b, startLoops(b))
	go io.Copy(server, server) // echo
	msg, buf := make([]byte, 1024), make([]byte, 1024)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		client.Write(msg)
		if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelayBulk streams through a pair one way.
func BenchmarkRelayBulk(b *testing.B) {
	client, server, _ := relayed(b, startLoops(b))
	go io.Copy(io.Discard, client)
	chunk := make([]byte, 256<<10)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if _, err := server.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// A pair handed over as the loops stop either is refused or ends with
// them, never left registered on a loop that has gone.
func TestRelayAddedAsTheLoopsStop(t *testing.T) {
	for range 50 {
		ls, err := Start(1)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := tcpPair(t)
		b, _ := tcpPair(t)
		ls.Stop()
		p, err := ls.Relay(a, b)
		if errors.Is(err, ErrStopped) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
			if !errors.Is(p.Result().Err, ErrStopped) {
				t.Fatalf("a pair ended by the stop: %v, want ErrStopped", p.Result().Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a pair added in the stop's batch never ended")
		}
	}
}

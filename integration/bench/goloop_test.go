package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// startLoop serves go-loop in this process, for as long as the test binary
// runs: the loop has no stop, as the bench's process has none.
func startLoop(t *testing.T) string {
	t.Helper()
	ln, addr, err := loopListen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go serveLoop(ln)
	return addr
}

// go-loop carries every load it takes part in: new TLS tunnels, keep-alive
// inside one, and downloads it must keep up with.
func TestGoLoopCarriesTheTunnelLoads(t *testing.T) {
	up := shortLoads(t)
	r := &running{addr: startLoop(t)}
	checkLoads(t, r, up, "tunnels,https,tlsbulk,bulk")
}

// A half-close passes on each way, and the tunnel ends after both; a
// target that refuses the dial is answered 502. A relay that got these
// wrong would hang the bench's loads or cut them short.
func TestGoLoopHalfCloseAndRefusal(t *testing.T) {
	addr := startLoop(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's half-close
		got <- string(b)
		io.WriteString(c, "bye")
	}()

	c, br, resp := connectVia(t, addr, ln.Addr().String(), "early")
	defer c.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s; want 200", resp.Status)
	}
	if _, err := io.WriteString(c, " hello"); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	select {
	case s := <-got:
		if s != "early hello" {
			t.Errorf("upstream read %q, want %q", s, "early hello")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's half-close never reached the upstream")
	}
	if b, err := io.ReadAll(br); err != nil || string(b) != "bye" {
		t.Errorf("client read %q, %v; want %q then EOF", b, err, "bye")
	}

	refused := ln.Addr().String()
	ln.Close()
	c2, _, resp := connectVia(t, addr, refused, "")
	defer c2.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("CONNECT to a closed port: %s; want 502", resp.Status)
	}
}

// What one side sends after the other has half-closed reaches a slow
// reader whole and in order, and the tunnel ends once both have: with the
// receiver behind, the loop holds what it read, and a sender's hang-up
// arrives while it does (it had lost and reordered bytes).
func TestGoLoopHalfCloseUnderBackpressure(t *testing.T) {
	addr := startLoop(t)
	const size = 8 << 20
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i/251)
	}
	// slowRead reads r to its end a little at a time, the reader the
	// loop waits for.
	slowRead := func(r io.Reader) ([]byte, error) {
		var got []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, first := range []string{"client", "upstream"} {
		t.Run(first+" half-closes first", func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			upstreamGot := make(chan []byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Minute))
				if first == "client" {
					io.ReadAll(c)
					c.Write(want)
					return
				}
				c.(*net.TCPConn).CloseWrite()
				got, _ := slowRead(c)
				upstreamGot <- got
			}()
			c, br, resp := connectVia(t, addr, ln.Addr().String(), "")
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT: %s; want 200", resp.Status)
			}
			var got []byte
			if first == "client" {
				c.(*net.TCPConn).CloseWrite()
				time.Sleep(100 * time.Millisecond) // the upstream gets ahead
				got, err = slowRead(br)
			} else {
				if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
					t.Fatalf("client read %d bytes, %v; want the upstream's EOF", len(b), err)
				}
				if _, err = c.Write(want); err == nil {
					err = c.(*net.TCPConn).CloseWrite()
				}
				if err != nil {
					t.Fatal(err)
				}
				select {
				case got = <-upstreamGot:
				case <-time.After(time.Minute):
					t.Fatal("the upstream never read to its end")
				}
			}
			if err != nil || !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && got[i] == want[i] {
					i++
				}
				t.Errorf("read %d of %d bytes, %v, the first %d as sent; want all, in order", len(got), size, err, i)
			}
		})
	}
}

// connectVia sends a CONNECT for target to the proxy at addr, early (the
// tunnel's first bytes) in the same write, and reads the answer; the
// connection has 10 s for the rest of the test.
func connectVia(t *testing.T, addr, target, early string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"+early); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, br, resp
}

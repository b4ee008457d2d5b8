package adminclient

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestDialHandshakeRespectsCtx: a pod that takes the connection and never
// answers does not hold Dial past its ctx's deadline or cancellation.
func TestDialHandshakeRespectsCtx(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, unanswered
		}
	}()
	deadline, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(deadline, socket, "127.0.0.1:8001"); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Dial past its deadline: %v, want a deadline exceeded", err)
	}
	(<-accepted).Close()

	cancelled, cancel2 := context.WithCancel(context.Background())
	go func() {
		c := <-accepted // held open until the test ends
		t.Cleanup(func() { c.Close() })
		cancel2()
	}()
	if _, err := Dial(cancelled, socket, "127.0.0.1:8001"); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial cancelled during its handshake: %v, want context.Canceled", err)
	}
}

// TestErrnoValue: the errno the API names is found back.
func TestErrnoValue(t *testing.T) {
	for name, want := range map[string]syscall.Errno{"ECONNREFUSED": syscall.ECONNREFUSED, "ETIMEDOUT": syscall.ETIMEDOUT, "": 0, "ENOSUCH": 0} {
		if got := errnoValue(name); got != want {
			t.Errorf("errnoValue(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestDialKeepsBytesReadWithTheHandshake: what the service sent at once,
// read along with the 101 answer, is the connection's first bytes.
func TestDialKeepsBytesReadWithTheHandshake(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		// One write: the answer and the service's banner arrive together.
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n220 banner\r\n")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := Dial(ctx, socket, "127.0.0.1:8001")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got, err := io.ReadAll(conn)
	if string(got) != "220 banner\r\n" || err != nil {
		t.Errorf("read %q, %v; want the banner sent with the answer", got, err)
	}
}

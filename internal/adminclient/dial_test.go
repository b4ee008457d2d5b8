package adminclient

import (
	"context"
	"errors"
	"net"
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

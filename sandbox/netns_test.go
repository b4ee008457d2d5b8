package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// listenIn listens on 127.0.0.1:port inside n (0: any port) and answers
// every connection with hello.
func listenIn(t testing.TB, n *Network, port int, hello string) int {
	t.Helper()
	var ln net.Listener
	err := inNamespace(n.enter, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("listen in the namespace: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveHello(ln, hello)
	return ln.Addr().(*net.TCPAddr).Port
}

func serveHello(ln net.Listener, hello string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, hello)
		c.Close()
	}
}

func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DialContext reaches a listener inside the namespace; a plain dial of the
// same address reaches the host's (here: a listener the test holds on the
// same port), never the pod's.
func TestDialContextReachesTheNamespace(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces")
	n, err := NewNetwork(NetworkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go serveHello(host, "host")
	port := host.Addr().(*net.TCPAddr).Port
	listenIn(t, n, port, "pod")
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	c, err := n.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("DialContext(%s): %v", addr, err)
	}
	if got := readAll(t, c); got != "pod" {
		t.Fatalf("DialContext(%s) reached %q; want the pod's listener", addr, got)
	}
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("host dial %s: %v", addr, err)
	}
	if got := readAll(t, c); got != "host" {
		t.Fatalf("a plain dial of %s reached %q; want the host's listener", addr, got)
	}

	// Nothing listens on the pod's side of another port, whatever the
	// host has there.
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := n.DialContext(context.Background(), "tcp", other.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("DialContext(%s), a host-only port = %v; want ECONNREFUSED", other.Addr(), err)
	}
	if _, err := n.DialContext(context.Background(), "tcp", fmt.Sprintf("localhost:%d", port)); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Fatalf("DialContext(localhost) = %v; want a refusal to resolve a name", err)
	}
}

// A dial that cannot complete (the listener's accept queue is full, so its
// SYNs go unanswered) ends with its context.
func TestDialContextHonoursTheContext(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces")
	n, err := NewNetwork(NetworkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// A listening socket with a backlog of 0, never accepted from: it
	// queues one connection and drops later SYNs.
	var fd int
	err = inNamespace(n.enter, func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		return unix.Listen(fd, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	sa, _ := unix.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	// Fill the queue: the dials that complete are queued.
	var queued []net.Conn
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := n.DialContext(ctx, "tcp", addr)
		cancel()
		if err != nil {
			// The deadline ends the connect as the context's error or,
			// reached on the socket first (the dialer sets it there),
			// as the socket's; never as the kernel's own ETIMEDOUT,
			// minutes later.
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("DialContext(%s) with the queue full = %v; want the context's deadline", addr, err)
			}
			break
		}
		if queued = append(queued, c); len(queued) > 8 {
			t.Fatalf("%d connections queued on a listener with backlog 0", len(queued))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.DialContext(ctx, "tcp", addr); !errors.Is(err, context.Canceled) {
		t.Fatalf("DialContext with a cancelled context = %v; want context.Canceled", err)
	}
}

package supervisor

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if b, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// A probe of a hung service: the client sends its request and goes away;
// the service never answers. The relay must end (within the grace), not
// hold two goroutines and two sockets for as long as the service hangs.
func TestRelayEndsWhenTheServiceNeverAnswers(t *testing.T) {
	defer func(g time.Duration) { halfCloseGrace = g }(halfCloseGrace)
	halfCloseGrace = 200 * time.Millisecond
	client, clientSide := tcpPair(t)
	upstream, service := tcpPair(t)
	ended := make(chan struct{})
	go func() {
		relay(context.Background(), clientSide, bufio.NewReader(clientSide), upstream)
		close(ended)
	}()
	io.WriteString(client, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	client.Close()
	buf := make([]byte, 64)
	if n, _ := service.Read(buf); n == 0 {
		t.Fatal("the request did not reach the service")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay is still open 10s after its client left, with the service silent")
	}
	// The service's side is closed too: its next read ends.
	service.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(service); err != nil {
		t.Errorf("the service's connection was not closed: %v", err)
	}
}

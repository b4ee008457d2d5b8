package proxy

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// http.Server half-closes a connection after its last answer only if the
// connection can (else the client sees the end after the server's close
// delay): the wrapper that audits the server's refusals must pass that on.
func TestServedConnHalfCloses(t *testing.T) {
	client, server := testutil.TCPPair(t)
	var c net.Conn = &servedConn{Conn: server, cc: &clientConn{}}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("servedConn has no CloseWrite: http.Server cannot half-close it")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client read after CloseWrite = %d, %v; want EOF", n, err)
	}
}

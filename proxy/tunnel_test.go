package proxy

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// relayed is a client and an upstream joined by relay, as a tunnel joins
// them; it returns the two outer ends.
func relayed(t testing.TB) (client, upstream net.Conn, done <-chan [2]int64) {
	client, clientSide := testutil.TCPPair(t)
	upstreamSide, upstream := testutil.TCPPair(t)
	ch := make(chan [2]int64, 1)
	go func() {
		up, down, _ := copyBoth(clientSide, upstreamSide)
		clientSide.Close()
		upstreamSide.Close()
		ch <- [2]int64{up, down}
	}()
	return client, upstream, ch
}

// A tunnel passes a small message and a bulk transfer intact, passes a
// half-close on and still carries the answer, and counts the bytes of each
// direction.
func TestRelayCarriesBothWaysAndHalfClose(t *testing.T) {
	client, upstream, done := relayed(t)
	client.SetDeadline(time.Now().Add(10 * time.Second))
	upstream.SetDeadline(time.Now().Add(10 * time.Second))
	bulk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() {
		client.Write([]byte("hello"))
		client.Write(bulk)
		client.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(upstream)
	if err != nil || !bytes.Equal(got, append([]byte("hello"), bulk...)) {
		t.Fatalf("upstream read %d bytes, %v; want hello and 1 MiB then EOF", len(got), err)
	}
	// The client's half-close reached the upstream, which still answers.
	upstream.Write([]byte("bye"))
	upstream.Close()
	back, err := io.ReadAll(client)
	if err != nil || string(back) != "bye" {
		t.Fatalf("client read %q, %v; want bye then EOF", back, err)
	}
	if n := <-done; n[0] != int64(len(bulk)+5) || n[1] != 3 {
		t.Fatalf("relay counted up %d, down %d; want %d, 3", n[0], n[1], len(bulk)+5)
	}
}

// A tunnel ended by an error (the upstream resets it) says so: copyBoth
// returns what ended it, for the close line, where a clean end says
// nothing.
func TestCopyBothSaysWhatEndedIt(t *testing.T) {
	client, clientSide := testutil.TCPPair(t)
	upstreamSide, upstream := testutil.TCPPair(t)
	ended := make(chan error, 1)
	go func() {
		_, _, err := copyBoth(clientSide, upstreamSide)
		ended <- err
	}()
	upstream.(*net.TCPConn).SetLinger(0)
	upstream.Close() // a reset
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "relay down") {
			t.Fatalf("copyBoth after a reset = %v; want the upstream's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("copyBoth did not end after the upstream's reset")
	}
	client.Close()
}

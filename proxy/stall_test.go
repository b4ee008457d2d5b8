package proxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A client is cut only for accepting nothing for the whole write timeout:
// one reading slowly but steadily gets everything, one that stopped
// reading is cut and the cut is reported, and a deadline the proxy set
// itself (a lingering close) still bounds a write without counting as a
// stall.
func TestStallConn(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 4<<20)
	for _, tc := range []struct {
		name        string
		timeout     time.Duration
		own         time.Duration // a caller's write deadline, 0 for none
		read        func(c io.Reader)
		wantErr     bool
		wantStalled bool
	}{
		{"steady reader", 2 * time.Second, 0, func(c io.Reader) {
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}, false, false},
		{"stopped reader", 300 * time.Millisecond, 0, func(io.Reader) {}, true, true},
		{"caller's deadline", time.Hour, 300 * time.Millisecond, func(io.Reader) {}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := testutil.TCPPair(t)
			// Small buffers, so that a reader that stops is felt within
			// the payload.
			client.(*net.TCPConn).SetReadBuffer(64 << 10)
			server.(*net.TCPConn).SetWriteBuffer(64 << 10)
			go tc.read(client)
			c := &stallConn{Conn: server, timeout: tc.timeout}
			if tc.own > 0 {
				c.SetWriteDeadline(time.Now().Add(tc.own))
			}
			n, err := c.Write(payload)
			if (err != nil) != tc.wantErr || c.stalled.Load() != tc.wantStalled {
				t.Fatalf("Write = %d, %v, stalled %v; want error %v, stalled %v", n, err, c.stalled.Load(), tc.wantErr, tc.wantStalled)
			}
			if !tc.wantErr && n != len(payload) {
				t.Fatalf("Write = %d; want %d", n, len(payload))
			}
		})
	}
}

// Many small writes share a deadline (armWrite keeps one with time to
// spare): a client reading steadily is never cut however long the writes
// go on past the timeout, and one that stops reading is cut all the same.
func TestStallConnManyWrites(t *testing.T) {
	const timeout = 100 * time.Millisecond
	chunk := bytes.Repeat([]byte("x"), 1024)
	t.Run("steady reader", func(t *testing.T) {
		client, server := testutil.TCPPair(t)
		go io.Copy(io.Discard, client)
		c := &stallConn{Conn: server, timeout: timeout}
		for end := time.Now().Add(5 * timeout); time.Now().Before(end); {
			if _, err := c.Write(chunk); err != nil {
				t.Fatalf("Write to a reading client: %v", err)
			}
			time.Sleep(timeout / 20)
		}
	})
	t.Run("stopped reader", func(t *testing.T) {
		client, server := testutil.TCPPair(t)
		client.(*net.TCPConn).SetReadBuffer(64 << 10)
		server.(*net.TCPConn).SetWriteBuffer(64 << 10)
		c := &stallConn{Conn: server, timeout: timeout}
		var err error
		for n := 0; err == nil && n < 1<<20; n++ {
			_, err = c.Write(chunk)
		}
		if err == nil || !c.stalled.Load() {
			t.Fatalf("writes to a client reading nothing: %v, stalled %v; want a stall", err, c.stalled.Load())
		}
	})
}

package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// A second ClientHello, sent after the upstream asked for one with a
// HelloRetryRequest, is the one the server acts on: it must name the same
// server as the first, on the explicit and the transparent path alike.
// The stub upstream answers the first ClientHello with a HelloRetryRequest
// in records of 10 bytes, and a second one with a ServerHello; a real Go
// server that takes P-256 only asks a Go client, which offers X25519
// first, for another. A HelloRetryRequest that reaches the proxy in more
// than one read is passed on whole before the client is waited for.
func TestHelloRetryChecked(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	retry := serverHelloRecords(helloRetryRandom, 10)
	hello := func(name string) []byte { return clientHelloRecord(t, name) }
	for _, path := range []string{"explicit", "transparent"} {
		via := map[string]any{"explicit": nil, "transparent": "transparent"}[path]
		open := func(t *testing.T) net.Conn {
			var c net.Conn
			if path == "explicit" {
				c = connectTo(t, d, "stub.tp.test")
			} else {
				c = d.dial(t, fmt.Sprintf("%s:%d", tpStub, fx.port))
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(10 * time.Second))
			return c
		}
		// stub answers a first ClientHello with answer, its pieces
		// written apart, and passes what reaches it after, up to a
		// ClientHello, on.
		stub := func(answer ...[]byte) <-chan []byte {
			got := make(chan []byte, 1)
			serve := func(c net.Conn) {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				readRecord(c)
				for i, piece := range answer {
					if i > 0 {
						time.Sleep(100 * time.Millisecond)
					}
					c.Write(piece)
				}
				var after []byte
				for {
					r, err := readRecord(c)
					if after = append(after, r...); err != nil || r[0] != recordChangeCipherSpec {
						break
					}
				}
				got <- after
				if len(after) > 0 {
					c.Write(serverHelloRecords([32]byte{1}, 1<<10))
					io.Copy(io.Discard, c)
				}
			}
			fx.stub.Store(&serve)
			return got
		}
		t.Run(path+": the second ClientHello names another host", func(t *testing.T) {
			got := stub(retry)
			c := open(t)
			c.Write(hello("stub.tp.test"))
			wantRead(t, c, retry)
			c.Write(append(bytes.Clone(changeCipherSpec), hello("closed.tp.test")...))
			wantNothing(t, c)
			if after := <-got; len(after) > 0 {
				t.Fatalf("the upstream read %d bytes after the first ClientHello; want none", len(after))
			}
			l := fx.line(t, AuditCloseMessage, "stub.tp.test", policies.ReasonHostMismatch, func(l map[string]any) bool { return l["via"] == via })
			if detail, _ := l["detail"].(string); !strings.Contains(detail, `"closed.tp.test" in the ClientHello after a HelloRetryRequest`) {
				t.Fatalf("close line %v; want its detail to name the second ClientHello's server name", l)
			}
		})
		// Sent before the upstream asked for it, it is held back until
		// it has, and checked.
		t.Run(path+": both ClientHellos at once", func(t *testing.T) {
			got := stub(retry)
			c := open(t)
			c.Write(slices.Concat(hello("stub.tp.test"), changeCipherSpec, hello("tls.tp.test")))
			wantRead(t, c, retry)
			wantNothing(t, c)
			if after := <-got; len(after) > 0 {
				t.Fatalf("the upstream read %d bytes after the first ClientHello; want none", len(after))
			}
			fx.line(t, AuditCloseMessage, "stub.tp.test", policies.ReasonHostMismatch, func(l map[string]any) bool {
				detail, _ := l["detail"].(string)
				return l["via"] == via && strings.Contains(detail, `"tls.tp.test" in the ClientHello after a HelloRetryRequest`)
			})
		})
		// Cut past the random (whose record ends at 60) and inside a
		// record's header.
		for _, pieces := range [][][]byte{{retry}, {retry[:62], retry[62:]}} {
			t.Run(fmt.Sprintf("%s: the second ClientHello names the same host, the first answer in %d pieces", path, len(pieces)), func(t *testing.T) {
				got := stub(pieces...)
				c := open(t)
				c.Write(hello("stub.tp.test"))
				wantRead(t, c, retry)
				second := append(bytes.Clone(changeCipherSpec), hello("stub.tp.test")...)
				c.Write(second)
				if after := <-got; !bytes.Equal(after, second) {
					t.Fatalf("the upstream read %d bytes after the first ClientHello; want the second, %d", len(after), len(second))
				}
				wantRead(t, c, serverHelloRecords([32]byte{1}, 1<<10))
			})
		}
		// A client that cannot answer a HelloRetryRequest (it offers no
		// group the server takes) ends its handshake with an alert, or
		// just closes: the tunnel ends, and no denial is recorded.
		for _, end := range []struct {
			name  string
			bytes []byte
		}{
			{"with a fatal alert", slices.Concat(changeCipherSpec, []byte{recordAlert, 3, 3, 0, 2, 2, 40})},
			{"by closing", nil},
		} {
			t.Run(path+": the client ends its handshake after the HelloRetryRequest "+end.name, func(t *testing.T) {
				stub(retry)
				c := open(t)
				c.Write(hello("stub.tp.test"))
				wantRead(t, c, retry)
				c.Write(end.bytes)
				c.(*net.TCPConn).CloseWrite()
				fx.line(t, AuditCloseMessage, "stub.tp.test", policies.ReasonAllowed, func(l map[string]any) bool {
					detail, _ := l["detail"].(string)
					return l["via"] == via && strings.Contains(detail, "the client ended its TLS handshake after a HelloRetryRequest")
				})
			})
		}
		t.Run(path+": an upstream that answers in no TLS", func(t *testing.T) {
			got := stub([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c := open(t)
			c.Write(hello("stub.tp.test"))
			wantNothing(t, c)
			<-got
			fx.line(t, AuditCloseMessage, "stub.tp.test", policies.ReasonUpstreamError, func(l map[string]any) bool { return l["via"] == via })
		})
		for _, split := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s: a Go client and server, its writes split %v", path, split), func(t *testing.T) {
				cfg, err := fx.upCA.ServerConfig("stub.tp.test")
				if err != nil {
					t.Fatal(err)
				}
				cfg.CurvePreferences = []tls.CurveID{tls.CurveP256}
				serve := func(c net.Conn) {
					if split {
						// Past the random, in the HelloRetryRequest's
						// only record.
						c = splitConn{c, 45}
					}
					tc := tls.Server(c, cfg)
					if _, err := http.ReadRequest(bufio.NewReader(tc)); err == nil {
						io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
					}
					tc.Close()
				}
				fx.stub.Store(&serve)
				tc := tls.Client(open(t), &tls.Config{ServerName: "stub.tp.test", RootCAs: fx.upCA.Pool, CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}})
				if err := tc.Handshake(); err != nil || !tc.ConnectionState().HelloRetryRequest {
					t.Fatalf("handshake: %v, HelloRetryRequest %v; want one completed after a HelloRetryRequest", err, tc.ConnectionState().HelloRetryRequest)
				}
				wantBody(t, httpGet(t, tc, "stub.tp.test", "/"), http.StatusOK, "ok")
			})
		}
	}
}

// splitConn writes what one Write is given past at bytes after a pause:
// its peer reads it in pieces.
type splitConn struct {
	net.Conn
	at int
}

func (c splitConn) Write(b []byte) (int, error) {
	if len(b) <= c.at {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b[:c.at])
	if err != nil {
		return n, err
	}
	time.Sleep(100 * time.Millisecond)
	k, err := c.Conn.Write(b[c.at:])
	return n + k, err
}

// What a write that failed partway did send is counted in the tunnel's
// bytes: the ClientHello's, the answer's, what followed the ClientHello.
func TestHelloRetryCountsShortWrites(t *testing.T) {
	p := &Proxy{cfg: Config{Limits: Limits{HandshakeTimeout: 10 * time.Second}}}
	hello := clientHelloRecord(t, "stub.tp.test")
	early := append(bytes.Clone(hello), "after"...)
	answer := serverHelloRecords([32]byte{1}, 1<<10)
	for _, tc := range []struct {
		name               string
		upLimit, downLimit int
		up, down           int
	}{
		{"the ClientHello", 7, len(answer), 7, 0},
		{"the answer", len(early), 7, len(hello), 7},
		{"what followed", len(hello) + 3, len(answer), len(hello) + 3, len(answer)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, clientPeer := net.Pipe()
			upstream, server := net.Pipe()
			t.Cleanup(func() {
				for _, c := range []net.Conn{client, clientPeer, upstream, server} {
					c.Close()
				}
			})
			go io.Copy(io.Discard, clientPeer)
			go func() {
				if _, err := readRecord(server); err == nil {
					server.Write(answer)
					io.Copy(io.Discard, server)
				}
			}()
			first := opening{proto: speaksTLS, early: early, serverName: "stub.tp.test"}
			up, down, ok := p.helloRetry(&shortConn{client, tc.downLimit}, &shortConn{upstream, tc.upLimit}, first, &decision{})
			if ok || up != int64(tc.up) || down != int64(tc.down) {
				t.Fatalf("helloRetry = %d up, %d down, %v; want %d, %d, false", up, down, ok, tc.up, tc.down)
			}
		})
	}
}

// shortConn's writes send left bytes in all, and fail past them.
type shortConn struct {
	net.Conn
	left int
}

func (c *shortConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b[:min(len(b), c.left)])
	if c.left -= n; err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return n, err
}

// serverHello finds a ServerHello's random however its records and reads
// split it, past warning alerts, and reads a HelloRetryRequest whole; an
// answer that is not TLS, or not a ServerHello, or a HelloRetryRequest
// larger than the buffer, is an error.
func TestServerHello(t *testing.T) {
	warning := []byte{recordAlert, 3, 3, 0, 2, alertWarning, 112} // unrecognized_name
	// 64 KiB said, in records of 16 KiB.
	huge := slices.Concat([]byte{recordHandshake, 3, 3, 0x40, 0, typeServerHello, 1, 0, 0, 3, 3}, helloRetryRandom[:], make([]byte, 16<<10-38),
		[]byte{recordHandshake, 3, 3, 0x40, 0}, make([]byte, 16<<10))
	for _, tc := range []struct {
		name   string
		answer []byte
		retry  bool
		err    string
	}{
		{"retry", serverHelloRecords(helloRetryRandom, 1<<10), true, ""},
		{"retry, a byte a record", serverHelloRecords(helloRetryRandom, 1), true, ""},
		{"no retry after a warning", append(warning, serverHelloRecords([32]byte{1}, 1<<10)...), false, ""},
		{"fatal alert", []byte{recordAlert, 3, 3, 0, 2, 2, 40}, false, ""},
		{"not TLS", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false, "no TLS record"},
		{"not a ServerHello", []byte{recordHandshake, 3, 3, 0, 38, 11, 0, 0, 34, 3, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}, false, "not a ServerHello"},
		{"cut short", serverHelloRecords(helloRetryRandom, 1<<10)[:20], false, "EOF"},
		{"retry cut short", serverHelloRecords(helloRetryRandom, 10)[:70], false, "EOF"},
		{"retry larger than the buffer", huge, false, "not whole in the first 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, retry, err := serverHello(iotest.OneByteReader(bytes.NewReader(tc.answer)), make([]byte, 16<<10))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("serverHello = %d, %v, %v; want an error saying %q", n, retry, err, tc.err)
				}
				return
			}
			if err != nil || retry != tc.retry || n > len(tc.answer) || retry && n != len(tc.answer) {
				t.Fatalf("serverHello = %d, %v, %v; want retry %v, and all of a retry read", n, retry, err, tc.retry)
			}
		})
	}
}

// serverHelloRecords is a TLS 1.3 ServerHello with random (a
// HelloRetryRequest asking for P-256 with helloRetryRandom) in records of
// at most split bytes of it each.
func serverHelloRecords(random [32]byte, split int) []byte {
	body := append([]byte{3, 3}, random[:]...)
	body = append(body, 0, 0x13, 0x01, 0, 0, 12, 0, 0x2b, 0, 2, 3, 4, 0, 0x33, 0, 2, 0, 0x17)
	msg := append([]byte{typeServerHello, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	var out []byte
	for len(msg) > 0 {
		k := min(split, len(msg))
		out = append(append(out, recordHandshake, 3, 3, byte(k>>8), byte(k)), msg[:k]...)
		msg = msg[k:]
	}
	return out
}

// clientHelloRecord is the ClientHello crypto/tls sends for serverName.
func clientHelloRecord(t *testing.T, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tls.Client(c, &tls.Config{ServerName: serverName}).Handshake()
		c.Close()
	}()
	r, err := readRecord(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readRecord reads one TLS record.
func readRecord(r io.Reader) ([]byte, error) {
	rec := make([]byte, 5)
	if _, err := io.ReadFull(r, rec); err != nil {
		return nil, err
	}
	rec = append(rec, make([]byte, int(rec[3])<<8|int(rec[4]))...)
	_, err := io.ReadFull(r, rec[5:])
	return rec, err
}

// wantRead checks that want is what c reads next.
func wantRead(t *testing.T, c net.Conn, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the client read % x, %v; want % x", got, err, want)
	}
}

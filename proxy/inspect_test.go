package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/proxy/certs"
)

// A request net/http cannot parse is described without what it quotes:
// the request line carries query values, a header line credentials.
func TestUnquotedKeepsSecretsOut(t *testing.T) {
	for _, raw := range []string{
		"GET /a%zz?token=SECRET HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /?token=SECRET HTTP/1.x\r\nHost: x\r\n\r\n",
		"GET /?token=SECRET\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nAuthorization SECRET\r\n\r\n",
	} {
		_, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err == nil {
			t.Fatalf("%q parsed", raw)
		}
		if msg := unquoted(err); msg == "" || strings.Contains(msg, "SECRET") {
			t.Errorf("unquoted(%v) = %q", err, msg)
		}
	}
}

// A client's Connection: close ends its connection with the proxy, not
// the proxy's pooled upstream connection: the next client's request goes
// over the same one, without a new upstream handshake.
func TestClientCloseKeepsUpstream(t *testing.T) {
	fx := newTPFixture(t)
	d := fx.dialer(t)
	tlsTo := func(c net.Conn) net.Conn {
		return tls.Client(c, &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots, NextProtos: []string{"http/1.1"}})
	}
	inspected := "GET /ok/x HTTP/1.1\r\nHost: api.tp.test\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name    string
		open    func() net.Conn
		request string
	}{
		{"inspected, CONNECT", func() net.Conn { return tlsTo(connectTo(t, d, "api.tp.test")) }, inspected},
		{"inspected, transparent", func() net.Conn { return tlsTo(d.dial(t, fmt.Sprintf("%s:%d", tpAPI, fx.port))) }, inspected},
		{"plain, absolute-form", func() net.Conn { return d.dial(t, fx.explicit) },
			fmt.Sprintf("GET http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%[1]d\r\nConnection: close\r\n\r\n", fx.port)},
		{"plain, transparent", func() net.Conn { return d.dial(t, fmt.Sprintf("%s:%d", tpWeb, fx.port)) },
			fmt.Sprintf("GET /ok/x HTTP/1.1\r\nHost: web.tp.test:%d\r\nConnection: close\r\n\r\n", fx.port)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var upstream []string
			for range 2 {
				c := tc.open()
				br := bufio.NewReader(c)
				resp := get(t, c, br, tc.request)
				// The client asked to close: the proxy closes.
				if _, err := br.ReadByte(); !resp.Close || err != io.EOF {
					t.Fatalf("after an answer to Connection: close: close=%v, read %v; want the connection closed", resp.Close, err)
				}
				c.Close()
				upstream = append(upstream, resp.Header.Get(tpUpstreamConn))
			}
			if upstream[0] == "" || upstream[0] != upstream[1] {
				t.Fatalf("upstream connections %q; want the second request on the first's", upstream)
			}
		})
	}
}

// The client's leg of an inspected connection agrees on X25519 with a
// client that offers it beside a post-quantum exchange (Go's and
// OpenSSL's defaults), and still serves one that offers only the latter.
func TestClientLegKeyExchange(t *testing.T) {
	ca, err := certs.LoadOrCreate(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{cfg: Config{CA: ca, Limits: DefaultLimits}}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	for _, tc := range []struct {
		name   string
		offers []tls.CurveID // nil: Go's defaults
		want   tls.CurveID
	}{
		{"Go's defaults", nil, tls.X25519},
		{"P-256 only", []tls.CurveID{tls.CurveP256}, tls.CurveP256},
		{"post-quantum only", []tls.CurveID{tls.X25519MLKEM768}, tls.X25519MLKEM768},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			done := make(chan error, 1)
			go func() {
				tc, err := p.serverTLS(server, "api.test")
				if err == nil {
					tc.Close()
				}
				done <- err
			}()
			c := tls.Client(client, &tls.Config{ServerName: "api.test", RootCAs: roots, CurvePreferences: tc.offers})
			if err := c.Handshake(); err != nil {
				t.Fatalf("handshake: %v (server: %v)", err, <-done)
			}
			if got := c.ConnectionState().CurveID; got != tc.want {
				t.Fatalf("key exchange %v; want %v", got, tc.want)
			}
			client.Close()
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
		})
	}
}

package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// hopByHop relays a WebSocket upgrade and nothing else: any other Upgrade
// (h2c, several protocols offered, Upgrade without Connection: upgrade) is
// dropped with the headers the client's Connection names.
func TestHopByHop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in, want  http.Header
		websocket bool
	}{
		{"websocket", http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}, "Sec-Websocket-Key": {"k"}},
			http.Header{"Connection": {"Upgrade"}, "Upgrade": {"WebSocket"}, "Sec-Websocket-Key": {"k"}}, true},
		{"h2c", http.Header{"Connection": {"Upgrade, HTTP2-Settings"}, "Upgrade": {"h2c"}, "Http2-Settings": {"AAMA"}, "Accept": {"*/*"}},
			http.Header{"Accept": {"*/*"}}, false},
		{"websocket offered with h2c", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket, h2c"}}, http.Header{}, false},
		{"two Upgrade lines", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket", "h2c"}}, http.Header{}, false},
		{"Upgrade without Connection", http.Header{"Upgrade": {"websocket"}}, http.Header{}, false},
		{"named and standard hop-by-hop headers", http.Header{"Connection": {"X-Trace, close"}, "X-Trace": {"1"}, "Keep-Alive": {"timeout=5"},
			"Proxy-Connection": {"keep-alive"}, "Proxy-Authorization": {"Basic eDp5"}, "Te": {"trailers"}, "Authorization": {"Bearer x"}},
			http.Header{"Authorization": {"Bearer x"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			if got := hopByHop(h); got != tc.websocket || !reflect.DeepEqual(h, tc.want) {
				t.Fatalf("hopByHop(%v) = %v, %v; want %v, %v", tc.in, got, h, tc.websocket, tc.want)
			}
		})
	}
}

// A plain request answered as the connection's last with its body unread
// (the body stopped arriving; a refused upload that waits for 100
// Continue) ends its connection after the answer: the server reads what
// is left of the body only as long as a close lingers, so a client that
// sends no more holds nothing.
func TestPlainLastAnswerEndsTheConnection(t *testing.T) {
	for _, tc := range []struct{ name, request, reason string }{
		{"the body stopped arriving", "GET http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%[1]d\r\nContent-Length: 100\r\n\r\n0123456789", string(policies.ReasonInvalidRequest)},
		{"a CONNECT in lower case, forwarded it would be one", "connect http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%[1]d\r\n\r\n", string(policies.ReasonInvalidRequest)},
		{"a refused upload waiting for 100 Continue", "POST http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%[1]d\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n", string(policies.ReasonMethodNotAllowed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newTPFixtureLimits(t, Limits{IdleTimeout: 300 * time.Millisecond})
			c := fx.dialer(t).dial(t, fx.explicit)
			defer c.Close()
			fmt.Fprintf(c, tc.request, fx.port)
			br := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			if !resp.Close || resp.Header.Get(ReasonHeader) != tc.reason {
				t.Fatalf("answer %d close=%v reason %q; want the connection's last, reason %s", resp.StatusCode, resp.Close, resp.Header.Get(ReasonHeader), tc.reason)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("after the answer the connection read %v; want its end (EOF)", err)
			}
		})
	}
}

// A request's trailer fields are not forwarded, on the plain path or in an
// inspected tunnel: read after the decision, a method override or an
// X-Original-URL there is decided by nobody, and servers that merge
// trailers into the header act on them.
func TestTrailersAreNotForwarded(t *testing.T) {
	fx := newTPFixture(t)
	const body = "Transfer-Encoding: chunked\r\nTrailer: X-HTTP-Method-Override, X-Original-URL\r\n\r\n" +
		"3\r\nabc\r\n0\r\nX-HTTP-Method-Override: DELETE\r\nX-Original-URL: /admin\r\n\r\n"
	for _, path := range []string{"plain", "inspected"} {
		t.Run(path, func(t *testing.T) {
			d := fx.dialer(t)
			var c net.Conn
			if path == "plain" {
				c = d.dial(t, fx.explicit)
				fmt.Fprintf(c, "GET http://web.tp.test:%d/ok/x HTTP/1.1\r\nHost: web.tp.test:%[1]d\r\n"+body, fx.port)
			} else {
				tc := tls.Client(connectTo(t, d, "api.tp.test"), &tls.Config{ServerName: "api.tp.test", RootCAs: fx.roots})
				c = tc
				fmt.Fprintf(c, "GET /ok/x HTTP/1.1\r\nHost: api.tp.test\r\n"+body)
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get(tpUpstreamAsked) == "" {
				t.Fatalf("answer %d %v; want the upstream's", resp.StatusCode, resp.Header)
			}
			if got := resp.Header.Values(tpUpstreamTrailer); len(got) > 0 {
				t.Fatalf("the upstream read the trailer fields %q; want none", got)
			}
		})
	}
}

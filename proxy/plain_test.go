package proxy

import (
	"net/http"
	"reflect"
	"testing"
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

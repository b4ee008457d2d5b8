package integration

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A request whose body framing peers may read differently (RFC 9112 6.1:
// Content-Length with Transfer-Encoding, a Transfer-Encoding folded over
// lines, a Transfer-Encoding on HTTP/1.0) is answered 400 invalid_request
// and its connection closed, plain and inside an inspected tunnel, before
// the policy or the upstream sees it; a chunked body the client malforms
// is its error, 400 invalid_request, not the upstream's 502.
func TestAmbiguousFramingIsRefused(t *testing.T) {
	w := newWorld(t)
	type path struct {
		name, host string
		dial       func(t *testing.T) net.Conn
		target     string // request target
		hostHeader string
	}
	paths := []path{
		{"plain", "plain.test", func(t *testing.T) net.Conn {
			c, err := net.Dial("tcp", w.proxy.addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}, fmt.Sprintf("http://plain.test:%d/stream", w.plainPort), fmt.Sprintf("plain.test:%d", w.plainPort)},
		{"inspected", "api.test", func(t *testing.T) net.Conn {
			raw := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
			return tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
		}, "/v1/hello", fmt.Sprintf("api.test:%d", w.tlsPort)},
	}
	cases := []struct{ name, proto, headers, body, detail string }{
		{"content-length and transfer-encoding", "HTTP/1.1", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n", "both Content-Length and Transfer-Encoding"},
		{"transfer-encoding and content-length", "HTTP/1.1", "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", "5\r\nhello\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"},
		{"folded transfer-encoding", "HTTP/1.1", "Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n", "folded"},
		{"transfer-encoding on HTTP/1.0", "HTTP/1.0", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "hello", "Transfer-Encoding"},
		{"malformed chunks", "HTTP/1.1", "Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n", "malformed request body"},
	}
	for _, pt := range paths {
		for _, tc := range cases {
			t.Run(pt.name+"/"+tc.name, func(t *testing.T) {
				c := pt.dial(t)
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				fmt.Fprintf(c, "GET %s %s\r\nHost: %s\r\n%s\r\n%s", pt.target, tc.proto, pt.hostHeader, tc.headers, tc.body)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				var d struct{ Reason, Hint string }
				raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				if err := json.Unmarshal(raw, &d); err != nil || resp.StatusCode != http.StatusBadRequest || d.Reason != "invalid_request" || !strings.Contains(d.Hint, tc.detail) {
					t.Fatalf("answer %s %s; want 400 invalid_request naming %q", resp.Status, raw, tc.detail)
				}
				// The status line carries the reason, as every refusal's:
				// what curl -v and Python show. A malformed body of a plain
				// request is found by goproxy's round trip, whose answer
				// net/http writes with its own reason phrase.
				if !(pt.name == "plain" && tc.name == "malformed chunks") && !strings.HasPrefix(resp.Status, "400 airlock: invalid_request: the request cannot be read unambiguously: ") {
					t.Errorf("status line %q; want it to carry the reason and hint", resp.Status)
				}
				if !resp.Close {
					t.Error("the answer does not say the connection closes")
				}
				if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
					t.Errorf("after the answer: read %d bytes, %v; want the connection closed", n, err)
				}
				w.proxy.outcome(t, func(a auditLine) bool {
					return a.Host == pt.host && a.Reason == "invalid_request" && a.Status == 400 && strings.Contains(a.Detail, tc.detail)
				})
			})
		}
	}
}

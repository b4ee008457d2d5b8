package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

func TestDotSegment(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/hello": "", "/v1/.well-known/x": "", "/a..b/c": "", "/files/a%2Fb": "", "/": "",
		"/v1/../v2": "..", "/v1/./x": ".", "/v2/..%2Fv1": "..", "/v2/%2e%2e/v1": "..", "/v2/%2E/v1": ".",
		"/v2/..;/v1": "..;", "/v2/.;jsessionid=1/x": ".;jsessionid=1", "/v1/..": "..",
	} {
		if got := dotSegment(path); got != want {
			t.Errorf("dotSegment(%q) = %q; want %q", path, got, want)
		}
	}
}

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

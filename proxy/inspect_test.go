package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

func TestAmbiguousPath(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/hello": "", "/v1/.well-known/x": "", "/a..b/c": "", "/files/a%2Fb": "", "/": "", "/caf%C3%A9": "", "/100%25": "",
		"/v1/../v2": "dot-segment", "/v1/./x": "dot-segment", "/v2/..%2Fv1": "dot-segment", "/v2/%2e%2e/v1": "dot-segment",
		"/v2/%2E/v1": "dot-segment", "/v2/..;/v1": "dot-segment", "/v1/..": "dot-segment",
		"/admin;x/users": "parameter", "/api/delete;x": "parameter", "/objects/a%3Bb": "",
		"/p/%252e%252e/admin": "escaped escape", "/p/%25%32%65%25%32%65/admin": "escaped escape", "/%2561dmin/x": "escaped escape", "/p/%252F": "escaped escape", "/p/%255C": "escaped escape",
		"/p/%c0%ae%c0%ae/admin": "not UTF-8", "/p/%ff": "not UTF-8",
		"/p/%EF%BC%8E%EF%BC%8E/admin": "dot-segment", "/p/\uff0e/x": "dot-segment", "/p/a\uff0eb": "",
	} {
		got := ambiguousPath(path)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("ambiguousPath(%q) = %q; want %q", path, got, want)
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

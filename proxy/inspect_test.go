package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
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

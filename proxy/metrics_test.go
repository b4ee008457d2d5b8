package proxy

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/proxy/certs"
)

// A sandbox that ended for good (a pod's one-off) leaves no series behind;
// the others keep theirs.
func TestMetricsForgetDropsOnlyThatSandbox(t *testing.T) {
	ca, err := certs.LoadOrCreate(t.TempDir(), 16)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(ca)
	for _, sb := range []string{"svc", "oneoff-1"} {
		m.countDecision(sb, "allow", "allowed")
		m.tunnelOpen(sb, 1)
		m.addBytes(sb, 10, 20)
		m.countScrubbed(sb, 1)
		m.countDNS(sb, "NOERROR")
	}
	m.Forget("oneoff-1")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if strings.Contains(string(body), `sandbox="oneoff-1"`) {
		t.Errorf("series of the forgotten sandbox remain:\n%s", body)
	}
	for _, name := range []string{"airlock_proxy_decisions_total", "airlock_proxy_active_tunnels", "airlock_proxy_bytes_total", "airlock_proxy_secrets_scrubbed_total", "airlock_proxy_dns_answers_total"} {
		if !strings.Contains(string(body), name+`{`) || !strings.Contains(string(body), `sandbox="svc"`) {
			t.Errorf("%s of sandbox svc is gone too:\n%s", name, body)
		}
	}
}

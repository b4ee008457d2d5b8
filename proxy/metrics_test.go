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
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	// Its tunnel outlives it (a half-close waiting on the upstream): the
	// series go when the tunnel ends, after what it records at its end.
	m.Forget("oneoff-1")
	if body := scrape(); !strings.Contains(body, `airlock_proxy_active_tunnels{sandbox="oneoff-1"} 1`) {
		t.Errorf("the forgotten sandbox's open tunnel is gone from the gauge:\n%s", body)
	}
	m.countDecision("oneoff-1", "allow", "allowed")
	m.addBytes("oneoff-1", 1, 1)
	m.tunnelOpen("oneoff-1", -1)
	body := scrape()
	if strings.Contains(body, `sandbox="oneoff-1"`) {
		t.Errorf("series of the forgotten sandbox remain:\n%s", body)
	}
	for _, name := range []string{"airlock_proxy_decisions_total", "airlock_proxy_active_tunnels", "airlock_proxy_bytes_total", "airlock_proxy_secrets_scrubbed_total", "airlock_proxy_dns_answers_total"} {
		if !strings.Contains(body, name+`{`) || !strings.Contains(body, `sandbox="svc"`) {
			t.Errorf("%s of sandbox svc is gone too:\n%s", name, body)
		}
	}
}

// A one-off id reused while its predecessor's tunnel lingers keeps its
// series (Keep): that tunnel's end does not drop the new sandbox's, nor
// unbalance its gauge of open tunnels.
func TestMetricsKeepCancelsAPendingForget(t *testing.T) {
	ca, err := certs.LoadOrCreate(t.TempDir(), 16)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(ca)
	m.tunnelOpen("oneoff-1", 1) // the first one's, outliving it
	m.Forget("oneoff-1")
	m.Keep("oneoff-1") // the id runs again
	m.tunnelOpen("oneoff-1", 1)
	m.countDecision("oneoff-1", "allow", "allowed")
	m.tunnelOpen("oneoff-1", -1) // the first one's tunnel ends
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`airlock_proxy_active_tunnels{sandbox="oneoff-1"} 1`, `airlock_proxy_decisions_total{decision="allow",reason="allowed",sandbox="oneoff-1"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("after the old tunnel's end, %s is gone:\n%s", want, body)
		}
	}
}

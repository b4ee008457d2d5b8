package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// injecting is the real engine's decision, with inject added to that of
// the named rule: a preset built on the rules library cannot give every
// rule a test needs one (a rule that injects cannot say "websocket":
// true), and the fixture's secrets come from the test's environment.
type injecting struct {
	policies.Decider
	rule   string
	inject map[string]policies.SecretRef
}

func (d injecting) Decide(ctx context.Context, in *policies.Input) policies.Decision {
	dec := d.Decider.Decide(ctx, in)
	if dec.Allow && dec.Rule == d.rule && in.Request.Phase == policies.PhaseRequest {
		dec.Inject = d.inject
	}
	return dec
}

// A WebSocket the policy allows on a rule that injects a credential is
// refused all the same, since its frames cannot be scrubbed of an echo,
// and the denial says so: its reason and hint name the credential, not a
// missing "websocket": true the rule may well have.
func TestWebSocketInjectingCredentialIsRefused(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_WS_TOKEN", "s3cret-token")
	fx := newFuzzFixture(t)
	fx.p.cfg.Decider = injecting{fx.p.cfg.Decider, "ws", map[string]policies.SecretRef{"Authorization": {Env: "AIRLOCK_TEST_WS_TOKEN", Format: "Bearer {}"}}}
	client, tc, done := fx.inspectedTunnel(t, 10*time.Second)
	defer func() { client.Close(); <-done }()
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: %s:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", fuzzHost, fx.port)
	resp, d := denialOn(t, tc)
	want := `a WebSocket to GET api.fuzz.test:` + fmt.Sprint(fx.port) + `/ws is not allowed by rule "ws": the rule injects a credential, which the WebSocket's frames could echo unscrubbed; use a rule without inject for WebSockets`
	if resp.StatusCode != http.StatusForbidden || d.Reason != string(policies.ReasonWebSocketInjects) || d.Rule != "ws" || d.Hint != want {
		t.Fatalf("answer %d %+v; want 403 %s by rule ws, hint %q", resp.StatusCode, d, policies.ReasonWebSocketInjects, want)
	}
	if !strings.Contains(resp.Status, "airlock: "+string(policies.ReasonWebSocketInjects)+": ") {
		t.Errorf("status line %q does not carry the reason", resp.Status)
	}
}

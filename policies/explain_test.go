package policies_test

import (
	"context"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The checks an explanation lists are the library's: a WebSocket denial
// names the websocket check of the closest rule as the one that failed.
func TestExplainChecksAreTheLibrarys(t *testing.T) {
	in := &policies.Input{
		Sandbox: policies.Sandbox{Preset: "reviewer"},
		Process: policies.Process{Exe: "/usr/bin/curl"},
		Request: policies.Request{Phase: policies.PhaseRequest, Host: "api.github.com", Port: 443, Method: "GET", Path: "/repos/o/r/events", Upgrade: "websocket"},
	}
	x, err := embedded(t).Explain(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if x.Decision.Reason != policies.ReasonWebSocketNotAllowed || x.Closest != "github-api-read" || !x.Evaluated {
		t.Fatalf("Explain(websocket) = %+v; want websocket_not_allowed closest to github-api-read", x)
	}
	for _, re := range x.Rules {
		if re.Rule != x.Closest {
			continue
		}
		var failed []string
		for _, c := range re.Failed() {
			failed = append(failed, c.Check)
		}
		if !slices.Equal(failed, []string{"websocket"}) {
			t.Fatalf("closest rule %q failed %v; want [websocket]", re.Rule, failed)
		}
		return
	}
	t.Fatalf("Explain(websocket) lists no rule %q: %+v", x.Closest, x.Rules)
}

// An input the engine refuses before the preset (invalid_request) is
// explained as not evaluated, never as a preset without rules.
func TestExplainRefusedInputIsNotEvaluated(t *testing.T) {
	x, err := embedded(t).Explain(context.Background(), &policies.Input{Sandbox: policies.Sandbox{Preset: "reviewer"}})
	if err != nil {
		t.Fatal(err)
	}
	if x.Decision.Reason != policies.ReasonInvalidRequest || x.Evaluated || len(x.Rules) != 0 {
		t.Fatalf("Explain({}) = %+v; want invalid_request, not evaluated", x)
	}
}

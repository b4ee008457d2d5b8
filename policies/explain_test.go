package policies_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
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

// A pinned binary entry wins over an unpinned one matching the same path:
// another file at the pinned path is denied as hash_mismatch, the hint
// saying the pin did not match, and explain names the sha256 check.
func TestPinnedBinaryWinsOverUnpinned(t *testing.T) {
	pin := strings.Repeat("a", 64)
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, map[string]string{"pinned.rego": "package airlock.presets.pinned\n\nimport data.airlock.lib\n\n" +
		`rules := [{"name": "gh", "binaries": [{"path": "/usr/bin/gh", "sha256": "` + pin + `"}, {"path": "/usr/bin/*"}], "hosts": ["api.github.com"]}]` +
		"\n\ndenies := []\n\ndecision := lib.decide(rules, denies)\n"})
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		exe, sha256 string
		reason      policies.Reason
	}{
		{"/usr/bin/gh", strings.Repeat("b", 64), policies.ReasonHashMismatch},
		{"/usr/bin/gh", pin, policies.ReasonAllowed},
		{"/usr/bin/curl", strings.Repeat("b", 64), policies.ReasonAllowed},
	} {
		in := &policies.Input{Sandbox: policies.Sandbox{Preset: "pinned"}, Process: policies.Process{Exe: tc.exe, SHA256: tc.sha256},
			Request: policies.Request{Phase: policies.PhaseConnect, Host: "api.github.com", Port: 443}}
		x, err := e.Explain(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if x.Decision.Reason != tc.reason {
			t.Errorf("%s (sha256 %.8s…): %s; want %s", tc.exe, tc.sha256, x.Decision.Reason, tc.reason)
			continue
		}
		if tc.reason != policies.ReasonHashMismatch {
			continue
		}
		if h := x.Decision.Hint(in); !strings.Contains(h, "does not match the sha256 pinned for its path") || !strings.Contains(h, `closest rule "gh"`) {
			t.Errorf("hint %q; want it to say the pin for the path did not match", h)
		}
		var failed []string
		for _, c := range x.Rules[0].Failed() {
			failed = append(failed, c.Check)
		}
		if !slices.Equal(failed, []string{"sha256"}) {
			t.Errorf("explain: failed %v; want [sha256]", failed)
		}
	}
}

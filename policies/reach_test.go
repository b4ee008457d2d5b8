package policies_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

const reachPreset = `package airlock.presets.reach

import data.airlock.lib

rules := [
	{"name": "exact", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["api.exact.test"]},
	{"name": "wild", "binaries": [{"path": "/usr/bin/*"}], "hosts": ["*.wild.test"], "ports": [8443]},
]

denies := [{"name": "no-bad", "hosts": ["bad.wild.test"]}]

decision := lib.decide(rules, denies)
`

// MayReach is true exactly for the hosts a rule's pattern names, and it
// never says false for a host Decide could allow: for every host it
// refuses, every binary and port the presets name is denied.
func TestMayReach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, map[string]string{"reach.rego": reachPreset})
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []struct {
		host  string
		reach bool // in preset reach
	}{
		{"api.exact.test", true},
		{"API.Exact.Test.", true}, // canonicalised
		{"exact.test", false},
		{"x.api.exact.test", false},
		{"a.wild.test", true},
		{"a.b.wild.test", true},
		{"bad.wild.test", true}, // a deny rule may still deny it: MayReach only says it could be allowed
		{"wild.test", false},    // *. never matches the apex
		{"xwild.test", false},
		{"other.test", false},
		{"127.0.0.1", false},
		{"", false},
		{"a b.test", false},
		{"*", false},
	}
	for _, h := range hosts {
		if got := e.MayReach("reach", h.host); got != h.reach {
			t.Errorf("MayReach(reach, %q) = %v; want %v", h.host, got, h.reach)
		}
		if e.MayReach("no-such-preset", h.host) {
			t.Errorf("MayReach(no-such-preset, %q) = true; want false", h.host)
		}
		if canon, err := policies.CanonicalHost(h.host); err == nil && !e.MayReach("permissive", h.host) {
			t.Errorf("MayReach(permissive, %q) = false; want true (its rule names *; canonical %q)", h.host, canon)
		}
	}
	// MayReach false ⇒ Decide denies, for every binary and port tried.
	ports := []int{22, 80, 443, 8443, 18443}
	for _, preset := range e.Presets() {
		p, _ := e.Preset(preset)
		bins := []string{"/usr/bin/curl", "/usr/bin/git"}
		for _, r := range p.Rules {
			for _, b := range r.Binaries {
				if !strings.Contains(b.Path, "*") {
					bins = append(bins, b.Path)
				}
			}
			ports = append(ports, r.Ports...)
		}
		for _, h := range hosts {
			if e.MayReach(preset, h.host) {
				continue
			}
			for _, exe := range bins {
				for _, port := range ports {
					for _, req := range []policies.Request{
						{Phase: policies.PhaseConnect, Host: h.host, Port: port},
						{Phase: policies.PhaseRequest, Host: h.host, Port: port, Method: "GET", Path: "/"},
						{Phase: policies.PhaseRequest, Host: h.host, Port: port, Method: "POST", Path: "/v1/chat/completions"},
					} {
						in := &policies.Input{Sandbox: policies.Sandbox{Preset: preset}, Process: policies.Process{Exe: exe}, Request: req}
						if d := e.Decide(context.Background(), in); d.Allow {
							t.Errorf("MayReach(%s, %q) = false, yet Decide(%s %+v) = %+v", preset, h.host, exe, req, d)
						}
					}
				}
			}
		}
	}
	// And where it says true, some binary and port is allowed.
	for _, h := range []struct {
		host, exe string
		port      int
	}{
		{"api.exact.test", "/usr/bin/curl", 443},
		{"a.b.wild.test", "/usr/bin/wget", 8443},
	} {
		in := &policies.Input{Sandbox: policies.Sandbox{Preset: "reach"}, Process: policies.Process{Exe: h.exe},
			Request: policies.Request{Phase: policies.PhaseConnect, Host: h.host, Port: h.port}}
		if d := e.Decide(context.Background(), in); !d.Allow {
			t.Errorf("Decide(reach, %s → %s:%d) = %+v; want allowed", h.exe, h.host, h.port, d)
		}
	}
}

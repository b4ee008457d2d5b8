package policies_test

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
)

// benchCase is one question with the answer the benchmark checks for.
type benchCase struct {
	in   policies.Input
	want policies.Reason
}

// benchCases are connect and request decisions across the full preset set:
// for each preset an allowed and a denied question of each phase.
func benchCases() map[string][]benchCase {
	const (
		node = "/usr/bin/node"
		git  = "/usr/lib/git-core/git-remote-http"
		curl = "/usr/bin/curl"
	)
	conn := func(preset, exe, host string, want policies.Reason) benchCase {
		return benchCase{policies.Input{
			Sandbox: policies.Sandbox{ID: "sb-" + preset, Kind: preset, Preset: preset},
			Process: policies.Process{PID: 4242, Exe: exe, SHA256: "00"},
			Request: policies.Request{Phase: policies.PhaseConnect, Host: host, Port: 443},
		}, want}
	}
	req := func(preset, exe, method, host, path string, want policies.Reason) benchCase {
		c := conn(preset, exe, host, want)
		c.in.Request.Phase, c.in.Request.Method, c.in.Request.Path = policies.PhaseRequest, method, path
		return c
	}
	ok, no := policies.ReasonAllowed, policies.ReasonHostNotAllowed
	return map[string][]benchCase{
		"connect": {
			conn("coder", node, "registry.npmjs.org", ok), conn("coder", node, "evil.example", no),
			conn("researcher", node, "api.anthropic.com", ok), conn("researcher", node, "example.org", no),
			conn("writer", node, "api.anthropic.com", ok), conn("writer", node, "github.com", no),
			conn("reviewer", git, "github.com", ok), conn("reviewer", curl, "api.github.com", ok),
			conn("fitness", node, "api.anthropic.com", ok), conn("fitness", node, "api.openai.com", no),
			conn("codex", "/usr/local/lib/node_modules/@openai/codex/vendor/x/codex/codex", "api.openai.com", ok),
			conn("opencode", "/usr/local/lib/node_modules/opencode-ai/bin/opencode", "openrouter.ai", ok),
			conn("standard", "/usr/bin/python3.11", "pypi.org", ok), conn("strict", curl, "example.org", no),
			conn("permissive", curl, "example.org", ok), conn("standard", curl, "pypi.org", policies.ReasonBinaryNotAllowed),
		},
		"request": {
			req("coder", node, "POST", "api.anthropic.com", "/v1/messages", ok),
			req("coder", node, "PUT", "registry.npmjs.org", "/left-pad", policies.ReasonMethodNotAllowed),
			req("reviewer", git, "POST", "github.com", "/o/r.git/git-upload-pack", ok),
			req("reviewer", git, "POST", "github.com", "/o/r.git/git-receive-pack", policies.ReasonDeniedByRule),
			req("reviewer", curl, "GET", "api.github.com", "/repos/o/r/pulls/1/files", ok),
			req("reviewer", curl, "DELETE", "api.github.com", "/repos/o/r", policies.ReasonMethodNotAllowed),
			req("researcher", "/usr/bin/gh", "GET", "api.github.com", "/search/code", ok),
			req("researcher", "/usr/bin/gh", "GET", "api.github.com", "/user/keys", policies.ReasonPathNotAllowed),
			req("writer", node, "POST", "api.anthropic.com", "/v1/messages", ok),
			req("standard", curl, "GET", "api.github.com", "/repos/o/r", ok),
		},
	}
}

// BenchmarkDecide reports decision latency percentiles (p50-ns, p99-ns) and
// allocations for connect and request decisions over every preset, with the
// decision cache (the proxy's hot path) and without it (the first time a
// question is asked). Every result is checked.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		size int
	}{{"cached", 0}, {"uncached", -1}} {
		e, err := policies.New(ctx, policies.Options{Source: policies.Source{FS: presets.FS}, Logger: discard(), CacheSize: mode.size})
		if err != nil {
			b.Fatal(err)
		}
		for _, phase := range []string{"connect", "request"} {
			cases := benchCases()[phase]
			b.Run(mode.name+"/"+phase, func(b *testing.B) {
				testutil.Latencies(b, func(i int) {
					c := &cases[i%len(cases)]
					in := c.in
					if d := e.Decide(ctx, &in); d.Reason != c.want {
						b.Fatalf("Decide(%s %s %s) = %s (%s), want %s", in.Sandbox.Preset, in.Process.Exe, in.Request.Host, d.Reason, d.Error, c.want)
					}
				})
			})
		}
	}
}

package policies_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// A description names exactly the preset's rules and shows what a reader
// must know of each: the text for every shipped preset carries its rules'
// reach, and every allow rule described is one Decide honours as described
// (an instance of its binaries, hosts, ports, methods, paths and query is
// allowed by that rule; a method outside its methods is not).
func TestDescribeShippedPresets(t *testing.T) {
	e := embedded(t)
	cases := []struct {
		preset string
		allows []string
		denies []string
		text   []string // lines (trimmed) the text must hold
	}{
		{"reviewer", []string{"anthropic-api", "github-api-read", "github-git-refs", "github-git-upload-pack"}, []string{"no-git-push", "no-git-push-discovery"}, []string{
			"hosts:    api.github.com", "methods:  GET HEAD OPTIONS",
			"binaries: /usr/bin/gh (unpinned) /usr/local/bin/gh (unpinned) /usr/bin/node (unpinned) /usr/local/bin/node (unpinned) /usr/local/bin/claude (unpinned) /usr/bin/curl (unpinned)",
			"injects:  header x-api-key from the proxy's env ANTHROPIC_API_KEY",
			"query:    service=git-upload-pack", "paths:    /**/git-receive-pack",
			"tls:      inspected (every request decided)",
		}},
		{"coder", []string{"anthropic-api", "nvidia-api", "npm-registry", "pypi", "go-modules", "github-git-refs", "github-git-upload-pack"}, []string{"no-git-push", "no-git-push-discovery"}, []string{
			`injects:  header authorization from the proxy's env NVIDIA_API_KEY as "Bearer %s"`,
			"hosts:    pypi.org files.pythonhosted.org", "binaries: /usr/bin/python3.* (unpinned) /usr/local/bin/python3.* (unpinned)",
		}},
		{"codex", []string{"openai-api", "nvidia-api", "github-git-refs", "github-git-upload-pack"}, []string{"no-git-push", "no-git-push-discovery"}, []string{
			`injects:  header authorization from the proxy's env OPENAI_API_KEY as "Bearer %s"`,
		}},
		{"opencode", []string{"openai-api", "anthropic-api", "nvidia-api", "openrouter-api", "github-git-refs", "github-git-upload-pack"}, []string{"no-git-push", "no-git-push-discovery"}, []string{
			"paths:    /api/v1/**", "methods:  GET POST",
		}},
		{"researcher", []string{"anthropic-api", "github-search"}, nil, []string{"paths:    /search/** /repos/**"}},
		{"writer", []string{"anthropic-api"}, nil, []string{"ports:    443"}},
		{"fitness", []string{"anthropic-api"}, nil, []string{"hosts:    api.anthropic.com"}},
		{"standard", []string{"npm-registry", "pypi", "go-modules", "github-git-refs", "github-git-upload-pack", "github-api-read"}, []string{"no-git-push", "no-git-push-discovery"}, []string{
			"hosts:    proxy.golang.org sum.golang.org",
		}},
		{"permissive", []string{"any-public-web"}, nil, []string{
			"hosts:    *", "ports:    80 443", "methods:  any", "binaries: /** (unpinned)",
			"tls:      tunnelled (opaque: requests inside are not seen)", "websocket: allowed (frames are not inspected)",
		}},
		{"strict", nil, nil, []string{"allows: nothing (every connection is denied)"}},
		{"demo", []string{"demo-model-list", "demo-model-chat"}, nil, []string{"ports:    18443", "paths:    /v1/models", "paths:    /v1/chat/completions"}},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.preset, func(t *testing.T) {
			seen[c.preset] = true
			d, err := e.Describe(c.preset)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := e.Preset(c.preset)
			if got := ruleNames(d.Allows); !slices.Equal(got, c.allows) || len(got) != len(p.Rules) {
				t.Errorf("Describe(%s) allows %v; want %v", c.preset, got, c.allows)
			}
			if got := ruleNames(d.Denies); !slices.Equal(got, c.denies) || len(got) != len(p.Denies) {
				t.Errorf("Describe(%s) denies %v; want %v", c.preset, got, c.denies)
			}
			var b strings.Builder
			if err := d.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(b.String(), "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			for _, want := range c.text {
				if !lines[want] {
					t.Errorf("Describe(%s) text lacks the line %q:\n%s", c.preset, want, b.String())
				}
			}
			for _, r := range d.Allows {
				checkHonoured(t, e, c.preset, r)
			}
		})
	}
	for _, name := range e.Presets() {
		if !seen[name] {
			t.Errorf("shipped preset %q has no case", name)
		}
	}
}

func ruleNames(rs []policies.RuleReach) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Rule)
	}
	return out
}

// instance turns a host or path glob into one concrete name it matches.
func instance(glob string) string {
	if glob == "*" {
		return "any.test"
	}
	return strings.ReplaceAll(strings.ReplaceAll(glob, "**", "x"), "*", "x")
}

// checkHonoured asks Decide about an instance of the described rule.
func checkHonoured(t *testing.T, e *policies.Engine, preset string, r policies.RuleReach) {
	t.Helper()
	in := policies.Input{
		Sandbox: policies.Sandbox{Preset: preset},
		Process: policies.Process{Exe: instance(r.Binaries[0].Path)},
		Request: policies.Request{Phase: policies.PhaseConnect, Host: instance(r.Hosts[0]), Port: r.Ports[0]},
	}
	if !r.Inspected {
		if d := e.Decide(context.Background(), &in); !d.Allow || d.Rule != r.Rule {
			t.Errorf("%s: tunnel %+v = %s by %q; want allowed by %q", preset, in.Request, d.Reason, d.Rule, r.Rule)
		}
		return
	}
	in.Request.Phase = policies.PhaseRequest
	in.Request.Method = "GET"
	if len(r.Methods) > 0 {
		in.Request.Method = r.Methods[0]
	}
	in.Request.Path = instance(r.Paths[0])
	for k, vs := range r.Query {
		if in.Request.Query == nil {
			in.Request.Query = map[string][]string{}
		}
		in.Request.Query[k] = vs[:1]
	}
	allowed := in
	if d := e.Decide(context.Background(), &allowed); !d.Allow || d.Rule != r.Rule {
		t.Errorf("%s: %+v = %s by %q; want allowed by %q", preset, allowed.Request, d.Reason, d.Rule, r.Rule)
	}
	if len(r.Methods) > 0 && !slices.Contains(r.Methods, "DELETE") {
		in.Request.Method = "DELETE"
		if d := e.Decide(context.Background(), &in); d.Allow {
			t.Errorf("%s: DELETE %+v allowed by %q; the description says methods %v", preset, in.Request, d.Rule, r.Methods)
		}
	}
}

// An unknown preset is refused, naming the presets the bundle has.
func TestDescribeUnknownPreset(t *testing.T) {
	_, err := embedded(t).Describe("nope")
	if !errors.Is(err, policies.ErrNoPreset) || !strings.Contains(err.Error(), "reviewer") {
		t.Fatalf("Describe(nope) = %v; want ErrNoPreset listing the presets", err)
	}
}

const describeInspectPreset = `package airlock.presets.described

import data.airlock.lib

rules := [
	{"name": "pinned", "binaries": [{"path": "/usr/bin/curl", "sha256": ["` + zeros + `"]}], "hosts": ["*.mirror.test"]},
	{"name": "elsewhere", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["other.test"]},
	{"name": "secret-file", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["files.test"], "inject": {"x-token": {"file": "/run/token", "format": "T %s"}}},
]

denies := [{"name": "no-admin", "hosts": ["a.mirror.test"], "paths": ["/admin/**"]}]

decision := lib.decide(rules, denies)
`

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

// A rule with no request-level condition is a tunnel unless a deny rule on
// an overlapping host must see its requests (lib._inspect); pins and file
// secrets are named, the secret's value never.
func TestDescribeInspectionAndPins(t *testing.T) {
	dir := t.TempDir()
	writeBundle(t, dir, map[string]string{"described.rego": describeInspectPreset})
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Describe("described")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		inspected bool
		by        string
	}{{true, "no-admin"}, {false, ""}, {true, "rule"}}
	for i, w := range want {
		if r := d.Allows[i]; r.Inspected != w.inspected || r.InspectedBy != w.by {
			t.Errorf("rule %q inspected %v by %q; want %v by %q", r.Rule, r.Inspected, r.InspectedBy, w.inspected, w.by)
		}
	}
	if got := d.Allows[0].Binaries; len(got) != 1 || !slices.Equal(got[0].SHA256, []string{zeros}) {
		t.Errorf("pinned binaries = %+v; want the pin", got)
	}
	if got := d.Allows[2].Inject; !slices.Equal(got, []policies.Injection{{Header: "x-token", File: "/run/token", Format: "T %s"}}) {
		t.Errorf("inject = %+v", got)
	}
	var b strings.Builder
	d.WriteText(&b)
	for _, line := range []string{
		"tls:      inspected (deny rule no-admin needs to see requests)",
		`injects:  header x-token from the proxy's file /run/token as "T %s"`,
		"binaries: /usr/bin/curl (sha256 " + zeros + ")",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("text lacks %q:\n%s", line, b.String())
		}
	}
	// The description agrees with Decide: the tunnel of "pinned" to the
	// deny's host is inspected, that of "elsewhere" is not.
	for _, c := range []struct {
		host    string
		inspect bool
	}{{"a.mirror.test", true}, {"other.test", false}} {
		dec := e.Decide(context.Background(), &policies.Input{
			Sandbox: policies.Sandbox{Preset: "described"},
			Process: policies.Process{Exe: "/usr/bin/curl", SHA256: zeros},
			Request: policies.Request{Phase: policies.PhaseConnect, Host: c.host, Port: 443},
		})
		if !dec.Allow || dec.Inspect != c.inspect {
			t.Errorf("Decide(connect %s) = %+v; want allowed, inspect %v", c.host, dec, c.inspect)
		}
	}
}

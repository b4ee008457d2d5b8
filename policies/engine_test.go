package policies_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/decisiontable"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
)

func embedded(t testing.TB, opts ...func(*policies.Options)) *policies.Engine {
	t.Helper()
	o := policies.Options{Source: policies.Source{FS: presets.FS}, Logger: discard()}
	for _, f := range opts {
		f(&o)
	}
	e, err := policies.New(context.Background(), o)
	if err != nil {
		t.Fatalf("policies.New(embedded): %v", err)
	}
	return e
}

func TestDecisionCases(t *testing.T) {
	cases, err := decisiontable.Load("testdata/decisions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, cached := range []bool{true, false} {
		size := 0
		if !cached {
			size = -1
		}
		e := embedded(t, func(o *policies.Options) { o.CacheSize = size })
		for _, c := range cases {
			// Twice: the second answer may come from the cache.
			for i := 0; i < 2; i++ {
				d := e.Decide(context.Background(), c.Input())
				if !c.Matches(d) {
					t.Errorf("%s (cached=%v, try %d): Decide = %+v; want %+v", c.Note, cached, i, d, c.Want)
				}
				if d.Policy != e.Hash() || d.Preset != c.Preset {
					t.Errorf("%s: decision names policy %q preset %q; want %q %q", c.Note, d.Policy, d.Preset, e.Hash(), c.Preset)
				}
			}
		}
	}
}

func TestZeroDecisionDenies(t *testing.T) {
	var d policies.Decision
	if d.Allow || d.Inspect {
		t.Fatalf("zero Decision = %+v; want a denial", d)
	}
}

func TestInjectionIsDecided(t *testing.T) {
	in := &policies.Input{
		Sandbox: policies.Sandbox{Preset: "codex"},
		Process: policies.Process{Exe: "/usr/local/lib/node_modules/@openai/codex/vendor/x/codex/codex"},
		Request: policies.Request{Phase: policies.PhaseRequest, Host: "api.openai.com", Port: 443, Method: "POST", Path: "/v1/responses"},
	}
	d := embedded(t).Decide(context.Background(), in)
	ref, ok := d.Inject["authorization"]
	if !d.Allow || !ok || ref.Env != "OPENAI_API_KEY" || ref.Format != "Bearer %s" {
		t.Fatalf("Decide(codex → openai) = %+v; want allow with authorization from OPENAI_API_KEY", d)
	}
}

func TestCancelledEvaluationDenies(t *testing.T) {
	e := embedded(t, func(o *policies.Options) { o.CacheSize = -1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := &policies.Input{
		Sandbox: policies.Sandbox{Preset: "permissive"},
		Process: policies.Process{Exe: "/usr/bin/curl"},
		Request: policies.Request{Phase: policies.PhaseConnect, Host: "example.org", Port: 443},
	}
	d := e.Decide(ctx, in)
	if d.Allow || d.Reason != policies.ReasonPolicyError || d.Error == "" {
		t.Fatalf("Decide(cancelled) = %+v; want deny policy_error with the error", d)
	}
}

// writeBundle makes a bundle directory from the embedded presets, with
// files overridden or added by name ("" deletes).
func writeBundle(t *testing.T, dir string, override map[string]string) {
	t.Helper()
	entries, err := presets.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		raw, err := presets.FS.ReadFile(ent.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ent.Name()), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range override {
		p := filepath.Join(dir, name)
		if body == "" {
			os.Remove(p)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lockedBundle writes the presets into a directory with its lock file.
func lockedBundle(t *testing.T) (string, *policies.Bundle) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, nil)
	b, err := policies.LoadBundle(policies.Source{Path: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := policies.WriteLock(filepath.Join(dir, policies.LockFileName), policies.NewLock(b)); err != nil {
		t.Fatal(err)
	}
	return dir, b
}

func TestTamperedPresetRefusesToStart(t *testing.T) {
	ctx := context.Background()
	dir, b := lockedBundle(t)
	if _, err := policies.New(ctx, policies.Options{Source: policies.Source{Path: dir}, Logger: discard()}); err != nil {
		t.Fatalf("New with matching lock: %v", err)
	}

	// One byte changed in one preset.
	p := filepath.Join(dir, "reviewer.rego")
	raw, _ := os.ReadFile(p)
	raw[len(raw)-2] ^= 0x01
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := policies.New(ctx, policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if !errors.Is(err, policies.ErrIntegrity) || !strings.Contains(err.Error(), "changed reviewer.rego") {
		t.Fatalf("New after tamper = %v; want ErrIntegrity naming reviewer.rego", err)
	}

	// The pinned-hash flag refuses too, and must agree with a lock.
	_, err = policies.New(ctx, policies.Options{Source: policies.Source{Path: dir}, PinnedSHA256: b.Hash(), LockFile: filepath.Join(t.TempDir(), "none"), Logger: discard()})
	if err == nil {
		t.Fatal("New with a missing explicit lock file succeeded")
	}
	os.Remove(filepath.Join(dir, policies.LockFileName))
	_, err = policies.New(ctx, policies.Options{Source: policies.Source{Path: dir}, PinnedSHA256: b.Hash(), Logger: discard()})
	if !errors.Is(err, policies.ErrIntegrity) {
		t.Fatalf("New with stale --policy-sha256 = %v; want ErrIntegrity", err)
	}
}

func TestHashIsCanonical(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, nil)
	disk, err := policies.LoadBundle(policies.Source{Path: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb, err := policies.LoadBundle(policies.Source{FS: presets.FS}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if disk.Hash() != emb.Hash() {
		t.Fatalf("hash of the presets on disk %s != embedded %s", disk.Hash(), emb.Hash())
	}
	// A file the bundle does not load (README, the lock) does not count;
	// moving content between files does.
	writeBundle(t, dir, map[string]string{"README.md": "notes"})
	again, _ := policies.LoadBundle(policies.Source{Path: dir}, nil)
	if again.Hash() != disk.Hash() {
		t.Fatal("a non-policy file changed the bundle hash")
	}
	writeBundle(t, dir, map[string]string{"strict.rego": "", "strict2.rego": mustRead(t, "strict.rego")})
	moved, _ := policies.LoadBundle(policies.Source{Path: dir}, nil)
	if moved.Hash() == disk.Hash() {
		t.Fatal("renaming a preset file did not change the bundle hash")
	}
}

func mustRead(t *testing.T, name string) string {
	raw, err := presets.FS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// A deny rule may name a wildcard over a public suffix or a top-level
// domain: it only narrows (*.ngrok.io, *.co.uk, *.zip).
func TestSuffixWildcardsThatLoad(t *testing.T) {
	const head = "package airlock.presets.ok\n\nimport data.airlock.lib\n\n"
	body := head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["*.example.com"]}]` + "\n\n" +
		`denies := [{"name": "no-tunnels", "hosts": ["*.ngrok.io", "*.co.uk", "*.zip"]}]` + "\n\ndecision := lib.decide(rules, denies)\n"
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, map[string]string{"ok.rego": body})
	if _, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()}); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidPresetsAreRefused(t *testing.T) {
	const head = "package airlock.presets.bad\n\nimport data.airlock.lib\n\n"
	const tail = "\ndenies := []\n\ndecision := lib.decide(rules, denies)\n"
	for _, tc := range []struct{ name, body, want string }{
		{"typo in a field", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "method": "read-only"}]` + tail, `unknown field "method"`},
		{"non-canonical host", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["API.example.com"]}]` + tail, `write "api.example.com"`},
		{"mid-label wildcard", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["api*.example.com"]}]` + tail, "whole first label"},
		{"tld wildcard", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["*.com"]}]` + tail, "top-level domain"},
		{"public suffix wildcard", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["*.co.uk"]}]` + tail, "public suffix (co.uk"},
		{"wildcard over a suffix wildcard", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["*.kawasaki.jp"]}]` + tail, "public suffix (kawasaki.jp"},
		{"private suffix wildcard", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["*.workers.dev"]}]` + tail, "public suffix (workers.dev"},
		{"no binaries", head + `rules := [{"name": "r", "hosts": ["a.example"]}]` + tail, "lists no binaries"},
		{"unknown method set", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "methods": "readonly"}]` + tail, "not one of"},
		{"two **", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "paths": ["/**/x/**"]}]` + tail, "at most one **"},
		{"inspect false with paths", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "paths": ["/v1/**"], "inspect": false}]` + tail, "only inspection can enforce"},
		{"bad digest", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl", "sha256": "abc"}], "hosts": ["a.example"]}]` + tail, "64 lower-case hex"},
		{"duplicate names", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"]}, {"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["b.example"]}]` + tail, "used twice"},
		{"deny allowing websockets", head + "rules := []\n\ndenies := [{\"name\": \"d\", \"hosts\": [\"a.example\"], \"websocket\": true}]\n\ndecision := lib.decide(rules, denies)\n", "cannot allow WebSockets"},
		{"inject with websockets", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "websocket": true, "inject": {"authorization": {"env": "T"}}}]` + tail, "cannot both inject headers and allow WebSockets"},
		{"custom decision", head + "rules := []\n\ndenies := []\n\ndecision := {\"allow\": true}\n", "decision must be exactly"},
		{"preset reads input", head + "rules := [] if input.x\n" + tail, "may not read input"},
		{"syntax error", head + "rules := [\n", "rego_parse_error"},
		// Spellings the library would read otherwise than Go checked
		// them: a rule checked narrow, enforced wide.
		{"a set of methods", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/gh"}], "hosts": ["a.example"], "methods": {"GET", "HEAD"}, "paths": ["/status"]}]` + tail, `rules[0]["methods"] is a set`},
		{"denies a set", head + "rules := []\n\ndenies contains {\"name\": \"d\", \"hosts\": [\"a.example\"]}\n\ndecision := lib.decide(rules, denies)\n", "must be lists"},
		{"rules a set", head + "rules contains {\"name\": \"r\", \"binaries\": [{\"path\": \"/usr/bin/curl\"}], \"hosts\": [\"a.example\"]}\n" + tail, "must be lists"},
		{"a capitalised field", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "Hosts": ["a.example"]}]` + tail, `unknown field "Hosts"`},
		{"a capitalised name", head + `rules := [{"Name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"]}]` + tail, `unknown field "Name"`},
		{"a capitalised pin", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/gh", "SHA256": "` + strings.Repeat("a", 64) + `"}], "hosts": ["a.example"]}]` + tail, `binaries[0]: unknown field "SHA256"`},
		{"a long-s field", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hoſts": ["a.example"]}]` + tail, `unknown field "hoſts"`},
		{"a capitalised secret source", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "inject": {"authorization": {"Env": "T"}}}]` + tail, `inject authorization: unknown field "Env"`},
		// A decision is the bundle's answer to its input: nothing that
		// reads the clock, chance or the network from the proxy.
		{"the clock", head + "rules := [] if time.now_ns() > 0\n" + tail, "undefined function time.now_ns"},
		{"the network", head + "rules := [] if http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:9/\"})\n" + tail, "undefined function http.send"},
		// Empty or null, a field is "any" to Go and matches nothing in
		// the library: a deny rule that denies nothing.
		{"a deny's empty hosts", head + "rules := []\n\ndenies := [{\"name\": \"d\", \"hosts\": []}]\n\ndecision := lib.decide(rules, denies)\n", `field "hosts" is []`},
		{"a deny's null ports", head + "rules := []\n\ndenies := [{\"name\": \"d\", \"ports\": null}]\n\ndecision := lib.decide(rules, denies)\n", `field "ports" is null`},
		{"a deny's empty binaries", head + "rules := []\n\ndenies := [{\"name\": \"d\", \"binaries\": []}]\n\ndecision := lib.decide(rules, denies)\n", `field "binaries" is []`},
		{"an empty query", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"], "query": {}}]` + tail, `field "query" is {}`},
		{"a null pin", head + `rules := [{"name": "r", "binaries": [{"path": "/usr/bin/gh", "sha256": null}], "hosts": ["a.example"]}]` + tail, `binaries[0]: field "sha256" is null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			writeBundle(t, dir, map[string]string{"bad.rego": tc.body})
			_, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// A library that leaves a rule out of its index (a rule it could not
// read) refuses the load: the rules after it would answer for the hosts
// the index gives their positions.
func TestIndexMissingARuleIsRefused(t *testing.T) {
	lib, err := os.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	const all = `"rules": [_prep(r, false) | some r in rules],`
	if !strings.Contains(string(lib), all) {
		t.Fatalf("lib/airlock.rego no longer has %q", all)
	}
	dropping := strings.Replace(string(lib), all, `"rules": [_prep(r, false) | some r in rules; r.name != "dropped"],`, 1)
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, map[string]string{"lib/airlock.rego": dropping, "two.rego": "package airlock.presets.two\n\nimport data.airlock.lib\n\n" +
		`rules := [{"name": "dropped", "binaries": [{"path": "/usr/bin/gh"}], "hosts": ["a.example"]}, {"name": "kept", "binaries": [{"path": "/**"}], "hosts": ["b.example"]}]` +
		"\n\ndenies := []\n\ndecision := lib.decide(rules, denies)\n"})
	_, err = policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err == nil || !strings.Contains(err.Error(), "the library read 1 of 2 rules") {
		t.Fatalf("New = %v; want the load refused, naming the rule count", err)
	}
}

// A library whose evaluation fails must deny with policy_error.
func TestEvaluationErrorDenies(t *testing.T) {
	const lib = `package airlock.lib

index(rules, denies) := {"n": count(rules)}

decide(rules, denies) := decide_indexed(index(rules, denies))

decide_indexed(_) := {"allow": true, "inspect": false, "reason": "allowed", "rule": "a", "inject": {}} if input.request.port > 0

decide_indexed(_) := {"allow": false, "inspect": false, "reason": "host_not_allowed", "rule": "", "inject": {}} if input.request.port > 1

explain(rules, denies) := {}
`
	const malformed = `package airlock.lib

index(rules, denies) := {}

decide(rules, denies) := decide_indexed(index(rules, denies))

decide_indexed(_) := {"allow": "yes", "inspect": false, "reason": "allowed", "rule": "a"}

explain(rules, denies) := {}
`
	for name, body := range map[string]string{"conflict": lib, "malformed decision": malformed} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			writeBundle(t, dir, map[string]string{"lib/airlock.rego": body})
			e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			in := &policies.Input{Sandbox: policies.Sandbox{Preset: "permissive"}, Process: policies.Process{Exe: "/usr/bin/curl"},
				Request: policies.Request{Phase: policies.PhaseConnect, Host: "example.org", Port: 443}}
			d := e.Decide(context.Background(), in)
			if d.Allow || d.Reason != policies.ReasonPolicyError || d.Error == "" {
				t.Fatalf("Decide = %+v; want deny policy_error", d)
			}
		})
	}
}

// Every letter outside ASCII that a case mapping makes an ASCII one (ſ
// upper-cases to S, the Kelvin sign lower-cases to k) is that letter to a
// deny path, as it is to a server that folds case by that mapping: the
// library's fold is checked against Go's case tables, not a list kept by
// hand.
func TestDenyPathsFoldLettersCaseMappedToASCII(t *testing.T) {
	found := map[rune]rune{}
	for r := rune(utf8.RuneSelf); r <= unicode.MaxRune; r++ {
		maps := []rune{unicode.ToUpper(r), unicode.ToLower(r), unicode.ToTitle(r)}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			maps = append(maps, f)
		}
		for _, m := range maps {
			if m < utf8.RuneSelf {
				found[r] = unicode.ToLower(m)
			}
		}
	}
	if len(found) < 4 { // ſ, ı, İ and the Kelvin sign, at least
		t.Fatalf("found %q; want at least ſ, ı, İ and K", found)
	}
	var denies []string
	for r, a := range found {
		denies = append(denies, fmt.Sprintf(`{"name": "no-%U", "hosts": ["a.example"], "paths": ["/x%c/**"]}`, r, a))
	}
	body := "package airlock.presets.fold\n\nimport data.airlock.lib\n\n" +
		`rules := [{"name": "any", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["a.example"]}]` +
		"\n\ndenies := [" + strings.Join(denies, ", ") + "]\n\ndecision := lib.decide(rules, denies)\n"
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, map[string]string{"fold.rego": body})
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	for r, a := range found {
		in := &policies.Input{Sandbox: policies.Sandbox{Preset: "fold"}, Process: policies.Process{Exe: "/usr/bin/curl"},
			Request: policies.Request{Phase: policies.PhaseRequest, Host: "a.example", Port: 443, Method: "GET",
				Path: "/x" + url.PathEscape(string(r)) + "/y"}}
		if d := e.Decide(context.Background(), in); d.Reason != policies.ReasonDeniedByRule {
			t.Errorf("%U %c: %s (%s); want it denied as %c", r, r, d.Reason, d.Error, a)
		}
	}
}

package policies

import (
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// full is an input with every field set, so that no field of the policy's
// document is left out for being empty.
func full() *Input {
	return &Input{
		Sandbox: Sandbox{ID: "sb", Kind: "coder", Preset: "coder"},
		Process: Process{PID: 7, Exe: "/usr/bin/curl", SHA256: "ab"},
		Request: Request{Phase: PhaseRequest, Host: "api.github.com", Port: 443, Method: "GET",
			Path: "/a%2Fb", Query: map[string][]string{"q": {"1"}}, Upgrade: "websocket", SlashPath: "/a%252Fb"},
	}
}

// The policy's input is exactly the fields the library may read: a field
// no rule can read is not built on every decision.
func TestValueIsWhatTheLibraryReads(t *testing.T) {
	var got []string
	var walk func(prefix ast.Ref, v ast.Value)
	walk = func(prefix ast.Ref, v ast.Value) {
		obj, ok := v.(ast.Object)
		if !ok || refWithin(prefix, decidedFields) {
			got = append(got, prefix.String())
			return
		}
		obj.Foreach(func(k, v *ast.Term) { walk(prefix.Append(k), v.Value) })
	}
	walk(ast.InputRootRef, full().value())
	want := slices.Clone(decidedFields)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("value() holds %v; want exactly the fields the library reads, %v", got, want)
	}
}

// Every field decisions are keyed on is read by the embedded library: the
// list is evidence of what the policy reads, not a wish list.
func TestLibraryReadsEveryDecidedField(t *testing.T) {
	src, err := libFS.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ast.ParseModuleWithOpts("airlock.rego", string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	ast.WalkRefs(m, func(ref ast.Ref) bool {
		for _, f := range decidedFields {
			if ref.HasPrefix(ast.MustParseRef(f)) {
				read[f] = true
			}
		}
		return false
	})
	for _, f := range decidedFields {
		if !read[f] {
			t.Errorf("decidedFields lists %s, which the library never reads", f)
		}
	}
}

// The decision cache keys on every field the library reads: an input that
// differs in one of them is another question.
func TestCacheKeyCoversDecidedFields(t *testing.T) {
	change := map[string]func(*Input){
		"input.request.phase":      func(in *Input) { in.Request.Phase = PhaseConnect },
		"input.request.host":       func(in *Input) { in.Request.Host = "github.com" },
		"input.request.port":       func(in *Input) { in.Request.Port = 80 },
		"input.request.method":     func(in *Input) { in.Request.Method = "POST" },
		"input.request.path":       func(in *Input) { in.Request.Path = "/b" },
		"input.request.query":      func(in *Input) { in.Request.Query = map[string][]string{"q": {"2"}} },
		"input.request.upgrade":    func(in *Input) { in.Request.Upgrade = "" },
		"input.request.slash_path": func(in *Input) { in.Request.SlashPath = "" },
		"input.process.exe":        func(in *Input) { in.Process.Exe = "/usr/bin/node" },
		"input.process.sha256":     func(in *Input) { in.Process.SHA256 = "cd" },
	}
	for _, f := range decidedFields {
		mutate, ok := change[f]
		if !ok {
			t.Errorf("no change of %s is tried: add it to this table", f)
			continue
		}
		in := full()
		mutate(in)
		if keyOf(in) == keyOf(full()) {
			t.Errorf("an input that differs in %s has the same cache key", f)
		}
	}
}

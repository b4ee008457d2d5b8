package policies

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

// paramKey is the library's _param_key in Go: the hint names the git
// operation a deny rule on the service param read.
func TestParamKeyMirrorsLibrary(t *testing.T) {
	raw, err := libFS.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	q, err := rego.New(rego.Module("lib/airlock.rego", string(raw)), rego.Query("x := data.airlock.lib._param_key(input)")).
		PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{
		"service", "Service", "SERVICE", "service[]", "Service[]", "service[0]", "service[x]", "service[a][b]", "service[0]x",
		"[service]", "[service][0]", " service", "  service[]", "dry.run", "dry run", ".method",
		"service[", "service]", "ser[vice", "debug[mode", "a[b.c d[e", "[", "]", "[]", "[]x", "", "ſervice", "SERVİCE", "a[ü]", "ü[x]", "[ü]x", "é[",
		// Folded as a deny rule's path is (_fold).
		"SERVıCE", "ſervice[0]", "ｓｅｒｖｉｃｅ", "ＳＥＲＶＩＣＥ[]", "claß", "ﬁle", "a／b", "dry．run", "[ſervice]",
		"ſervice［0］", "［ſervice］", "．method", "debug［mode", "ｓｅｒｖｉｃｅ［ａ］［ｂ］",
	} {
		rs, err := q.Eval(context.Background(), rego.EvalInput(n))
		if err != nil || len(rs) != 1 {
			t.Fatalf("_param_key(%q): %v %v", n, rs, err)
		}
		if want, got := rs[0].Bindings["x"], ParamKey(n); got != want {
			t.Errorf("ParamKey(%q) = %q; the library's _param_key is %q", n, got, want)
		}
	}
	// Folded before the index and PHP's "_" are read: to a server that
	// maps fullwidth forms to ASCII, ［ ］ and ． are [ ] and . .
	for n, want := range map[string]string{"ſervice［0］": "service", "［ſervice］": "service", "dry．run": "dry_run", "．method": "_method", "debug［mode": "debug_mode"} {
		if got := ParamKey(n); got != want {
			t.Errorf("ParamKey(%q) = %q; want %q", n, got, want)
		}
	}
}

// fold is the library's _fold in Go, table and all: GitOperation names the
// operation a deny rule on the service param read, which folds names and
// values so.
func TestFoldMirrorsLibrary(t *testing.T) {
	raw, err := libFS.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	table, err := rego.New(rego.Module("lib/airlock.rego", string(raw)), rego.Query("x := data.airlock.lib._case_folds")).Eval(ctx)
	if err != nil || len(table) != 1 {
		t.Fatalf("_case_folds: %v %v", table, err)
	}
	want, _ := table[0].Bindings["x"].(map[string]any)
	got := map[string]any{}
	for i := 0; i+1 < len(caseFoldPairs); i += 2 {
		if _, dup := got[caseFoldPairs[i]]; dup {
			t.Errorf("caseFoldPairs names %q twice", caseFoldPairs[i])
		}
		got[caseFoldPairs[i]] = caseFoldPairs[i+1]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("caseFoldPairs = %v; the library's _case_folds is %v", got, want)
	}
	q, err := rego.New(rego.Module("lib/airlock.rego", string(raw)), rego.Query("x := data.airlock.lib._fold(input)")).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "Git-Receive-Pack", "gıt-receıve-pack", "ſervice", "ＡＤＭＩＮ", "straße", "ﬃ", "İ", "\u212a", "a／b∕c", "é"} {
		rs, err := q.Eval(ctx, rego.EvalInput(s))
		if err != nil || len(rs) != 1 {
			t.Fatalf("_fold(%q): %v %v", s, rs, err)
		}
		if want, got := rs[0].Bindings["x"], fold(s); got != want {
			t.Errorf("fold(%q) = %q; the library's _fold is %q", s, got, want)
		}
	}
}

// queryFailure is the library's _query_ok in Go, naming what failed: it
// finds a failure exactly when the library's condition does not hold.
func TestQueryFailureMirrorsLibrary(t *testing.T) {
	raw, err := libFS.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q, err := rego.New(rego.Module("lib/airlock.rego", string(raw)), rego.Query("x := data.airlock.lib._query_ok(input.cond)")).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cond := map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe", "fast"}}
	for _, tc := range []struct {
		query map[string][]string
		want  string
	}{
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe"}}, ""},
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe", "fast"}, "other": {"x"}}, ""},
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe"}, "Mode[]": {"fast"}}, ""},
		{map[string][]string{"service": {"git-upload-pack"}}, `query parameter "mode" is missing`},
		{map[string][]string{"mode": {"safe"}, "SERVICE": {"git-upload-pack"}}, `query parameter "service" is missing`},
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"unsafe"}}, `query parameter "mode" has a value the rule does not allow`},
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe", "unsafe"}}, `query parameter "mode" has a value the rule does not allow`},
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe"}, "MODE": {"unsafe"}}, `query parameter "mode", sent as "MODE" (a spelling servers read as it), has a value the rule does not allow`},
		{map[string][]string{"service": {"git-upload-pack"}, "mode": {"safe"}, "ſervice[0]": {"git-receive-pack"}}, `query parameter "service", sent as "ſervice[0]"`},
	} {
		rs, err := q.Eval(ctx, rego.EvalInput(map[string]any{"cond": cond, "request": map[string]any{"query": tc.query}}))
		if err != nil {
			t.Fatal(err)
		}
		got := queryFailure(cond, tc.query)
		if holds := len(rs) == 1; holds != (got == "") {
			t.Errorf("%v: the library's _query_ok holds: %v; queryFailure = %q", tc.query, holds, got)
		}
		if !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%v: queryFailure = %q; want %q", tc.query, got, tc.want)
		}
	}
}

package policies

import (
	"context"
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
	} {
		rs, err := q.Eval(context.Background(), rego.EvalInput(n))
		if err != nil || len(rs) != 1 {
			t.Fatalf("_param_key(%q): %v %v", n, rs, err)
		}
		if want, got := rs[0].Bindings["x"], paramKey(n); got != want {
			t.Errorf("paramKey(%q) = %q; the library's _param_key is %q", n, got, want)
		}
	}
}

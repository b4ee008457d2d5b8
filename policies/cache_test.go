package policies_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// Decisions are cached on the input fields the library may read: a rule is
// judged by the document it defines, so one that joins the library from
// another package (a bundle that brings its own library may write one) is
// held to the library's fields, and one that does not is held to a
// preset's none.
func TestInputReadsJudgedByRulePath(t *testing.T) {
	lib, err := os.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"the library's rule from package airlock", "package airlock\n\nlib._bins_ok(_) if input.process.pid > 0\n",
			"the policy library's data.airlock.lib._bins_ok reads input.process.pid, which decisions are not keyed on"},
		{"through an import of input", "package airlock\n\nimport input.process\n\nlib._bins_ok(_) if process.pid > 0\n",
			"the policy library's data.airlock.lib._bins_ok reads input.process, which decisions are not keyed on"},
		{"the library's rule reading a keyed field", "package airlock\n\nlib._bins_ok(_) if input.process.exe == \"/usr/bin/curl\"\n", ""},
		{"a preset's rule from package airlock", "package airlock\n\npresets.x.extra := 1 if input.request.host\n",
			"data.airlock.presets.x.extra reads input.request.host; presets are constant rules"},
		{"the gate's rule from package airlock", "package airlock\n\ngate.helper := input.action\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			writeBundle(t, dir, map[string]string{"lib/airlock.rego": string(lib), "x.rego": tc.body})
			_, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New = %v; want the bundle loaded", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

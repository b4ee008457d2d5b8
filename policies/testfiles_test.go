package policies_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// A test file never decides (compile leaves it out), but `airlock policy
// test` compiles it with the rest: a rule of one inside what decides would
// make the tests pass on another policy than the proxy enforces. CheckTests
// (which `policy test` runs first) refuses such a bundle, naming the file
// and package; a test package of its own, below the presets, beside the
// library or beside a policy module's package, passes. Loading is no test
// run: every one of these bundles loads.
func TestTestFileCannotChangeWhatDecides(t *testing.T) {
	for _, tc := range []struct {
		name, file, body, want string
		also                   map[string]string // more files of the bundle
	}{
		{"a clause added to a library function", "shim_test.rego", "package airlock.lib\n\n_bins_ok(_) := true\n\ntest_x if true\n",
			"shim_test.rego:3: test rule _bins_ok (in package data.airlock.lib) defines data.airlock.lib._bins_ok, inside data.airlock.lib", nil},
		{"a helper a preset could misspell, in the library", "shim_test.rego", "package airlock.lib\n\nmethod_setz := method_sets\n",
			"(in package data.airlock.lib) defines data.airlock.lib.method_setz", nil},
		{"a test alone in the library's package", "mylib_test.rego", "package airlock.lib\n\ntest_host if host_match(\"*.example.com\", \"a.example.com\")\n",
			"package airlock.lib_test", nil},
		{"the library from above", "shim_test.rego", "package airlock\n\nlib._paths_ok(_) := true\n",
			"defines data.airlock.lib._paths_ok", nil},
		{"a variable key over the library", "shim_test.rego", "package airlock\n\nlib[k] := true if some k in {\"_bins_ok\"}\n",
			"defines data.airlock.lib[k]", nil},
		{"a preset's package", "reviewer_extra_test.rego", "package airlock.presets.reviewer\n\ndenies_extra := []\n\ntest_x if true\n",
			"(in package data.airlock.presets.reviewer) defines data.airlock.presets.reviewer.denies_extra", nil},
		{"a preset no policy module declares", "ghost_test.rego", "package airlock.presets.ghost\n\ndecision := {\"allow\": true}\n",
			"inside data.airlock.presets,", nil},
		{"the gate's package", "gate_extra_test.rego", "package airlock.gate\n\nextra := 1\n",
			"inside data.airlock.gate,", nil},
		{"a package the presets import", "common_test.rego", "package airlock.common\n\nextra := 1\n",
			"defines data.airlock.common.extra, inside data.airlock.common, which coder.rego reads", nil},
		{"a test package below the library, which the presets import", "deep_test.rego", "package airlock.lib.deep_test\n\ntest_x if true\n",
			"inside data.airlock.lib, which", nil},
		{"a clause added to a policy module's function", "mine_test.rego", "package mine\n\nok(_) := true\n",
			"defines data.mine.ok, inside data.mine.ok, which mine.rego defines", map[string]string{"mine.rego": "package mine\n\nok(x) if x == 1\n"}},
		{"a document a policy module reads", "config_test.rego", "package config\n\nenabled := true\n",
			"defines data.config.enabled, inside data.config.enabled, which reader.rego reads", map[string]string{"reader.rego": "package reader\n\nallow if data.config.enabled\n"}},
		{"a document a policy module imports", "config_test.rego", "package config\n\nenabled := true\n",
			"inside data.config, which reader.rego reads", map[string]string{"reader.rego": "package reader\n\nimport data.config\n\nallow if config.enabled\n"}},
		{"beside a variable reference", "config_test.rego", "package config\n\nenabled := true\n",
			"inside data.config, which reader.rego reads", map[string]string{"reader.rego": "package reader\n\nallow if data.config[input.request.host]\n"}},
		// As the shipped tests are written.
		{"the library's tests in a package of their own", "mylib_test.rego", "package airlock.lib_test\n\nimport data.airlock.lib\n\ntest_host if lib.host_match(\"*.example.com\", \"a.example.com\")\n", "", nil},
		{"a preset's tests below the presets", "more_test.rego", "package airlock.presets.reviewer_test\n\nimport data.airlock.presets.reviewer\n\ntest_more if reviewer.decision\n", "", nil},
		{"helpers in a package nothing else declares", "helpers2_test.rego", "package airlock.testing2\n\nok := true\n", "", nil},
		// A bare name in a policy module is a rule of its package, in
		// whichever file: OPA's usual test beside the rules it tests
		// may change them.
		{"a variable a policy module's comprehension names", "mine_test.rego", "package mine\n\ni := 0\n",
			"mine_test.rego:3: test rule i (in package data.mine) defines data.mine.i, inside data.mine, the package of mine.rego, where a bare name is any rule of the package",
			map[string]string{"mine.rego": "package mine\n\nhosts := [h | h := [\"a.example\", \"b.example\"][i]]\n"}},
		{"tests in a policy module's package", "mine_test.rego", "package mine\n\ntest_ok if ok(1)\n", "inside data.mine, the package of mine.rego",
			map[string]string{"mine.rego": "package mine\n\nok(x) if x == 1\n"}},
		{"a policy module's package from above", "a_test.rego", "package a\n\nmine.i := 0\n", "defines data.a.mine.i, inside data.a.mine, the package of mine.rego",
			map[string]string{"mine.rego": "package a.mine\n\nhosts := [h | h := [\"a.example\"][i]]\n"}},
		{"a test package below a policy module's", "mine_test.rego", "package mine.mine_test\n\nimport data.mine\n\ntest_ok if mine.ok(1)\n", "",
			map[string]string{"mine.rego": "package mine\n\nok(x) if x == 1\n"}},
		{"a test package beside a policy module's", "mine_test.rego", "package mine_test\n\nimport data.mine\n\ni := 0\n\ntest_ok if mine.ok(1)\n", "",
			map[string]string{"mine.rego": "package mine\n\nok(x) if x == 1\n"}},
		// A policy module in package airlock has that package, not
		// those below it, where no bare name of its reaches: the
		// presets' helpers (package airlock.testing, in every one of
		// these bundles) and their tests still pass.
		{"beside a policy module in package airlock", "x_test.rego", "package airlock.presets.x_test\n\ntest_x if true\n", "", map[string]string{"x.rego": "package airlock\n\nlibrary.x := 1\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			files := map[string]string{tc.file: tc.body}
			for f, body := range tc.also {
				files[f] = body
			}
			writeBundle(t, dir, files)
			if _, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()}); err != nil {
				t.Fatalf("New = %v; want the bundle loaded (its test files never decide)", err)
			}
			b, err := policies.LoadBundle(policies.Source{Path: dir}, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = b.CheckTests()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckTests = %v; want the tests run", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("CheckTests = %v; want the test file refused, naming %s and %q", err, tc.file, tc.want)
			}
		})
	}
}

package main

import (
	"strings"
	"testing"
)

// policy eval reads the input document as written or not at all: a field
// spelt in another case is not taken for the field (encoding/json would),
// and a second document is not dropped.
func TestPolicyEvalReadsInputStrictly(t *testing.T) {
	const doc = `{"sandbox": {"preset": "reviewer"}, "process": {"exe": "/usr/bin/curl"},
		"request": {"phase": "request", "host": "api.github.com", "port": 443, "method": "GET", "path": "/x"}}`
	for _, tc := range []struct{ name, input, want string }{
		{"one document", doc, ""},
		{"one document, then white space", doc + "\n\n \t", ""},
		{"query keys in any case", `{"sandbox": {"preset": "reviewer"}, "request": {"phase": "connect", "host": "a.example", "port": 443, "query": {"Service[0]": ["x"]}}}`, ""},
		{"a capitalised section", `{"sandbox": {"preset": "reviewer"}, "Request": {"phase": "connect", "host": "a.example", "port": 443}}`, `input -: unknown field "Request"`},
		{"an upper-case field", `{"sandbox": {"preset": "reviewer"}, "request": {"phase": "connect", "HOST": "a.example", "port": 443}}`, `input -: request: unknown field "HOST"`},
		{"a capitalised preset", `{"sandbox": {"Preset": "reviewer"}}`, `input -: sandbox: unknown field "Preset"`},
		{"a misspelt section", `{"proces": {}}`, `input -: unknown field "proces"`},
		{"a second document", doc + `{"request": {"host": "evil.example"}}`, "data after the input document"},
		{"a stray brace", doc + "}", "data after the input document"},
		{"a wrong type", `{"request": {"port": "443"}}`, "cannot unmarshal string"},
		{"a field twice", `{"sandbox": {"preset": "reviewer"}, "request": {"phase": "connect", "host": "evil.example", "host": "a.example", "port": 443}}`, `the key "host" is given twice`},
		{"a section twice, merged by encoding/json", `{"sandbox": {"preset": "reviewer"}, "request": {"phase": "request", "method": "DELETE"}, "request": {"host": "a.example", "port": 443}}`, `the key "request" is given twice`},
		{"a query param twice", `{"sandbox": {"preset": "reviewer"}, "request": {"phase": "connect", "host": "a.example", "port": 443, "query": {"a": ["x"], "a": ["y"]}}}`, `the key "a" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := airlock(t, tc.input, "policy", "eval", "--input", "-")
			if tc.want == "" {
				if code != ExitOK {
					t.Fatalf("policy eval = %d\n%s\n%s", code, out, errs)
				}
				return
			}
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Fatalf("policy eval = %d\n%s\n%s; want exit %d naming %q", code, out, errs, ExitUsage, tc.want)
			}
		})
	}
}

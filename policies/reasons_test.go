package policies_test

import (
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

var updateREADME = flag.Bool("update", false, "rewrite README.md's reasons table from policies.Reasons")

// reasonConstants are the Reason constants the package declares, read from
// its source: a code added there without a row in Reasons fails the test.
func reasonConstants(t *testing.T) map[string]bool {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]bool{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
						continue
					}
					for _, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok {
							codes[strings.Trim(lit.Value, `"`)] = true
						}
					}
				}
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no Reason constants found in the package's source")
	}
	return codes
}

// placeholder is a {name} left in a hint after it is filled.
var placeholder = regexp.MustCompile(`\{[a-z0-9]+\}`)

func TestReasonsTableIsWhole(t *testing.T) {
	consts := reasonConstants(t)
	rows := map[policies.Reason]bool{}
	in := &policies.Input{
		Process: policies.Process{Exe: "/usr/bin/curl", SHA256: "0123456789abcdef"},
		Request: policies.Request{Phase: policies.PhaseRequest, Host: "h.test", Port: 443, Method: "GET", Path: "/p"},
	}
	for _, s := range policies.Reasons {
		if rows[s.Code] {
			t.Errorf("%s: two rows", s.Code)
		}
		rows[s.Code] = true
		if !consts[string(s.Code)] {
			t.Errorf("%s: a row for no Reason constant", s.Code)
		}
		if s.Hint == "" || s.When == "" || s.By == 0 {
			t.Errorf("%s: row %+v lacks a hint, a when or a raiser", s.Code, s)
		}
		if (s.Status == 0) != (s.Code == policies.ReasonAllowed) || (s.Status != 0 && http.StatusText(s.Status) == "") {
			t.Errorf("%s: status %d; want a denial's HTTP status, none for allowed only", s.Code, s.Status)
		}
		d := policies.Decision{Reason: s.Code, Rule: "r", Preset: "p"}
		if h := d.HintDetail(in, "the detail"); placeholder.MatchString(h) {
			t.Errorf("%s: hint %q has a placeholder no field fills", s.Code, h)
		}
	}
	for c := range consts {
		if !rows[policies.Reason(c)] {
			t.Errorf("reason %s has no row in policies.Reasons (status, raiser, hint, README)", c)
		}
	}
}

// readmeTable renders Reasons as README.md shows them.
func readmeTable() string {
	var b strings.Builder
	b.WriteString("| reason | status | raised by | when | hint |\n|---|---|---|---|---|\n")
	cell := strings.NewReplacer("|", `\|`).Replace
	for _, s := range policies.Reasons {
		status := "—"
		if s.Status != 0 {
			status = fmt.Sprint(s.Status)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` |\n", s.Code, status, s.By, cell(s.When), cell(s.Hint))
	}
	return b.String()
}

const (
	readmeBegin = "<!-- reasons: generated from policies.Reasons; go test ./policies -run TestREADMEReasons -update -->\n"
	readmeEnd   = "<!-- /reasons -->"
)

// TestREADMEReasons keeps README.md's reasons table the table of
// policies.Reasons: a reason without its row, or a row that says
// otherwise, fails until -update writes it.
func TestREADMEReasons(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	i, j := strings.Index(readme, readmeBegin), strings.Index(readme, readmeEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no reasons table between %q and %q", readmeBegin, readmeEnd)
	}
	i += len(readmeBegin)
	want := readmeTable()
	if readme[i:j] == want {
		return
	}
	if *updateREADME {
		if err := os.WriteFile("../README.md", []byte(readme[:i]+want+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's reasons table is not policies.Reasons; run go test ./policies -run TestREADMEReasons -update\n got:\n%s\nwant:\n%s", readme[i:j], want)
}

// A denied git request says which git operation it is: a push denied at
// its ref discovery (GET …/info/refs?service=git-receive-pack) reads as a
// push, not as a GET.
func TestHintNamesGitOperation(t *testing.T) {
	e := embedded(t)
	git := "/usr/lib/git-core/git-remote-http"
	for _, tc := range []struct {
		note, method, path string
		query              map[string][]string
		reason             policies.Reason
		want               []string
	}{
		{"push discovery", "GET", "/o/r/info/refs", map[string][]string{"service": {"git-receive-pack"}}, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push-discovery"`, "/o/r/info/refs?service=git-receive-pack"}},
		// Any spelling the deny rule reads as the service param.
		{"push discovery, service[]", "GET", "/o/r/info/refs", map[string][]string{"service[]": {"git-receive-pack"}}, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push-discovery"`}},
		{"push discovery, Service[0]", "GET", "/o/r/info/refs", map[string][]string{"Service[0]": {"git-receive-pack"}}, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push-discovery"`}},
		{"push discovery, a leading space", "GET", "/o/r/info/refs", map[string][]string{" service": {"git-receive-pack"}}, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push-discovery"`}},
		// Folded as servers that compare ignoring case by upper-casing
		// read the name and the value.
		{"push discovery, ſervice", "GET", "/o/r/info/refs", map[string][]string{"ſervice": {"git-receive-pack"}}, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push-discovery"`}},
		{"push discovery, gıt-receıve-pack", "GET", "/o/r/info/refs", map[string][]string{"service": {"gıt-receıve-pack"}}, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push-discovery"`}},
		{"push", "POST", "/o/r/git-receive-pack", nil, policies.ReasonDeniedByRule,
			[]string{`push to github.com is not allowed by preset "reviewer": `, `deny rule "no-git-push"`}},
		{"fetch from a path no rule allows", "POST", "/o/r/extra/git-upload-pack", nil, policies.ReasonPathNotAllowed,
			[]string{`clone or fetch from github.com is not allowed by preset "reviewer": path /o/r/extra/git-upload-pack`}},
		{"not git", "DELETE", "/o/r", nil, policies.ReasonMethodNotAllowed,
			[]string{`method DELETE is not allowed on github.com`}},
	} {
		in := &policies.Input{
			Sandbox: policies.Sandbox{ID: "t", Preset: "reviewer"},
			Process: policies.Process{PID: 1, Exe: git},
			Request: policies.Request{Phase: policies.PhaseRequest, Host: "github.com", Port: 443,
				Method: tc.method, Path: tc.path, Query: tc.query},
		}
		d := e.Decide(context.Background(), in)
		h := d.Hint(in)
		if d.Reason != tc.reason {
			t.Errorf("%s: reason %s; want %s", tc.note, d.Reason, tc.reason)
		}
		for _, w := range tc.want {
			if !strings.Contains(h, w) {
				t.Errorf("%s: hint %q; want it to say %q", tc.note, h, w)
			}
		}
		if tc.note == "not git" && strings.Contains(h, "push") {
			t.Errorf("%s: hint %q names a git operation", tc.note, h)
		}
	}
}

// A query_not_allowed denial names the parameter that failed, never its
// value: which one to fix, not only that the query did not satisfy the
// rule.
func TestQueryDenialNamesTheParameter(t *testing.T) {
	e := embedded(t)
	for _, tc := range []struct {
		note  string
		query map[string][]string
		want  string
	}{
		{"no service", nil, `query parameter "service" is missing`},
		{"another service", map[string][]string{"service": {"s3cr3t-value"}}, `query parameter "service" has a value the rule does not allow`},
		{"another spelling", map[string][]string{"service": {"git-upload-pack"}, "SERVICE[]": {"s3cr3t-value"}},
			`query parameter "service", sent as "SERVICE[]" (a spelling servers read as it), has a value the rule does not allow`},
	} {
		in := &policies.Input{
			Sandbox: policies.Sandbox{ID: "t", Preset: "coder"},
			Process: policies.Process{PID: 1, Exe: "/usr/lib/git-core/git-remote-http"},
			Request: policies.Request{Phase: policies.PhaseRequest, Host: "github.com", Port: 443, Method: "GET", Path: "/o/r/info/refs", Query: tc.query},
		}
		d := e.Decide(context.Background(), in)
		h := d.Hint(in)
		// In Detail, not Error: an Error says the policy did not
		// decide the request as asked (the proxy answers a method
		// override's denial as the request was sent then).
		if d.Reason != policies.ReasonQueryNotAllowed || d.Detail != tc.want || d.Error != "" || !strings.Contains(h, tc.want) {
			t.Errorf("%s: %s, detail %q, error %q, hint %q; want query_not_allowed naming %q in its detail", tc.note, d.Reason, d.Detail, d.Error, h, tc.want)
		}
		if strings.Contains(h, "s3cr3t") {
			t.Errorf("%s: hint %q quotes a query value", tc.note, h)
		}
	}
}

package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The denial as written on the wire, read back as a client reads it: the
// status line carries the reason and hint, a git request gets text/plain,
// anyone else the JSON Denial, and each its status from policies.Reasons.
func TestDenialResponse(t *testing.T) {
	git := "/usr/lib/git-core/git-remote-https"
	for _, tc := range []struct {
		note     string
		req      policies.Request
		reason   policies.Reason
		rule     string
		detail   string
		status   int
		phrase   string // the reason phrase's start
		gitLines []string
	}{
		{note: "denied CONNECT", req: policies.Request{Phase: policies.PhaseConnect, Host: "x.test", Port: 443},
			reason: policies.ReasonHostNotAllowed, status: 403,
			phrase: `airlock: host_not_allowed: no rule of preset "strict" allows host x.test; add the host`},
		{note: "SSRF, a detail with a line break and a tab", req: policies.Request{Phase: policies.PhaseConnect, Host: "in.test", Port: 443},
			reason: policies.ReasonSSRF, detail: "in.test resolves to\r\n10.0.0.1\t(private)", status: 403,
			phrase: `airlock: ssrf_blocked: the destination is not a public address: in.test resolves to 10.0.0.1 (private); an operator`},
		{note: "host mismatch", req: policies.Request{Phase: policies.PhaseRequest, Host: "a.test", Port: 443, Method: "GET", Path: "/"},
			reason: policies.ReasonHostMismatch, detail: `Host header "b.test"`, status: 421,
			phrase: `airlock: host_mismatch: the request does not name the host its tunnel was opened to (Host header "b.test")`},
		{note: "upstream", req: policies.Request{Phase: policies.PhaseConnect, Host: "a.test", Port: 443},
			reason: policies.ReasonUpstreamError, detail: "connection refused", status: 502, phrase: "airlock: upstream_error: "},
		{note: "limit", req: policies.Request{Phase: policies.PhaseConnect},
			reason: policies.ReasonConnectionLimit, detail: "9 connections", status: 503, phrase: "airlock: connection_limit: the sandbox already holds 9 connections"},
		{note: "a non-ASCII path, a long one", req: policies.Request{Phase: policies.PhaseRequest, Host: "a.test", Port: 443, Method: "GET", Path: "/é" + strings.Repeat("x", 1000)},
			reason: policies.ReasonPathNotAllowed, rule: "r", status: 403, phrase: "airlock: path_not_allowed: path /??xxx"},
		{note: "git push discovery", req: policies.Request{Phase: policies.PhaseRequest, Host: "github.com", Port: 443, Method: "GET",
			Path: "/o/r/info/refs", Query: map[string][]string{"service": {"git-receive-pack"}}},
			reason: policies.ReasonDeniedByRule, rule: "no-git-push-discovery", status: 403,
			phrase: `airlock: denied_by_rule: push to github.com is not allowed by preset "strict": deny rule "no-git-push-discovery"`,
			gitLines: []string{
				`airlock: push to github.com is not allowed by preset "strict": deny rule "no-git-push-discovery" matches GET github.com:443/o/r/info/refs?service=git-receive-pack; deny rules win over allow rules`,
				`airlock: reason=denied_by_rule rule="no-git-push-discovery" binary=` + git + ` sandbox=sb preset=strict`,
			}},
		{note: "git fetch pack", req: policies.Request{Phase: policies.PhaseRequest, Host: "github.com", Port: 443, Method: "POST", Path: "/o/r/git-upload-pack"},
			reason: policies.ReasonPathNotAllowed, rule: "git", status: 403,
			phrase: `airlock: path_not_allowed: clone or fetch from github.com`,
			gitLines: []string{
				`airlock: clone or fetch from github.com is not allowed by preset "strict": path /o/r/git-upload-pack is not allowed on github.com (closest rule "git")`,
				`airlock: reason=path_not_allowed rule="git" binary=` + git + ` sandbox=sb preset=strict`,
			}},
		{note: "git push, upstream failed", req: policies.Request{Phase: policies.PhaseRequest, Host: "github.com", Port: 443, Method: "POST", Path: "/o/r/git-receive-pack"},
			reason: policies.ReasonUpstreamError, rule: "push", detail: "connection reset", status: 502,
			phrase: `airlock: upstream_error: push to github.com: the upstream could not be reached: connection reset`,
			gitLines: []string{
				`airlock: push to github.com: the upstream could not be reached: connection reset`,
				`airlock: reason=upstream_error rule="push" binary=` + git + ` sandbox=sb preset=strict`,
			}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			dc := &decision{detail: tc.detail}
			dc.in.Request = tc.req
			dc.in.Sandbox = policies.Sandbox{ID: "sb", Preset: "strict"}
			dc.in.Process.Exe = git
			dc.d = policies.Decision{Reason: tc.reason, Rule: tc.rule, Preset: "strict"}
			var wire bytes.Buffer
			if err := dc.denialResponse(nil).Write(&wire); err != nil {
				t.Fatal(err)
			}
			line, _, _ := strings.Cut(wire.String(), "\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(&wire), nil)
			if err != nil {
				t.Fatalf("a client cannot read the denial: %v\n%s", err, line)
			}
			body, _ := io.ReadAll(resp.Body)
			_, phrase, _ := strings.Cut(resp.Status, " ")
			if resp.StatusCode != tc.status || !strings.HasPrefix(phrase, tc.phrase) {
				t.Errorf("status line %q; want %d %q…", line, tc.status, tc.phrase)
			}
			if len(phrase) > maxReasonPhrase || strings.ContainsFunc(phrase, func(r rune) bool { return r < ' ' || r > '~' }) {
				t.Errorf("reason phrase %q: %d bytes, or not printable ASCII", phrase, len(phrase))
			}
			if resp.Header.Get(ReasonHeader) != string(tc.reason) {
				t.Errorf("%s = %q; want %s", ReasonHeader, resp.Header.Get(ReasonHeader), tc.reason)
			}
			if tc.gitLines != nil {
				want := strings.Join(tc.gitLines, "\n") + "\n"
				if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" || string(body) != want {
					t.Errorf("git body (%s):\n%s\nwant text/plain:\n%s", ct, body, want)
				}
				return
			}
			var d Denial
			if err := json.Unmarshal(body, &d); err != nil || resp.Header.Get("Content-Type") != "application/json" ||
				d.Reason != string(tc.reason) || d.Hint != dc.hint() {
				t.Errorf("body %s (%v); want the JSON denial", body, err)
			}
		})
	}
}

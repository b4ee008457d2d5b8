package airlock.presets.standard_test

import data.airlock.presets.standard
import data.airlock.testing as t

test_registries_allowed if {
	d := standard.decision with input as t.req(t.python, "GET", "pypi.org", "/simple/requests/")
	d.allow
	g := standard.decision with input as t.req("/usr/local/go/bin/go", "GET", "proxy.golang.org", "/github.com/x/y/@v/list")
	g.allow
}

test_github_read_allowed_write_denied if {
	d := standard.decision with input as t.req(t.curl, "GET", "api.github.com", "/repos/o/r")
	d.allow
	w := standard.decision with input as t.req(t.curl, "DELETE", "api.github.com", "/repos/o/r")
	w.reason == "method_not_allowed"
}

test_push_denied if {
	p := standard.decision with input as t.req(t.git, "POST", "github.com", "/o/r/git-receive-pack")
	p.reason == "denied_by_rule"
}

test_model_apis_denied if {
	d := standard.decision with input as t.conn(t.node, "api.anthropic.com", 443)
	d.reason == "host_not_allowed"
}

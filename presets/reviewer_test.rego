package airlock.presets.reviewer_test

import data.airlock.presets.reviewer
import data.airlock.testing as t

test_github_api_get_allowed if {
	d := reviewer.decision with input as t.req(t.curl, "GET", "api.github.com", "/repos/o/r/pulls/1/files")
	d.allow
	d.rule == "github-api-read"
}

test_github_api_write_denied if {
	every m in ["POST", "PUT", "PATCH", "DELETE"] {
		d := reviewer.decision with input as t.req(t.curl, m, "api.github.com", "/repos/o/r/pulls/1/reviews")
		d.allow == false
		d.reason == "method_not_allowed"
		d.rule == "github-api-read"
	}
}

test_github_api_connect_is_inspected if {
	d := reviewer.decision with input as t.conn(t.curl, "api.github.com", 443)
	d.allow
	d.inspect
}

test_clone_allowed if {
	d := reviewer.decision with input as t.req_q(t.git, "GET", "github.com", "/o/r/info/refs", t.upload_pack)
	d.allow
	p := reviewer.decision with input as t.req(t.git, "POST", "github.com", "/o/r/git-upload-pack")
	p.allow
}

test_push_denied if {
	d := reviewer.decision with input as t.req_q(t.git, "GET", "github.com", "/o/r/info/refs", t.receive_pack)
	d.reason == "denied_by_rule"
	d.rule == "no-git-push-discovery"
	p := reviewer.decision with input as t.req(t.git, "POST", "github.com", "/o/r/git-receive-pack")
	p.reason == "denied_by_rule"
}

test_other_port_denied if {
	d := reviewer.decision with input as t.conn(t.curl, "api.github.com", 8443)
	d.reason == "port_not_allowed"
}

test_python_denied if {
	d := reviewer.decision with input as t.conn(t.python, "api.github.com", 443)
	d.reason == "binary_not_allowed"
}

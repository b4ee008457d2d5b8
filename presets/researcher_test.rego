package airlock.presets.researcher_test

import data.airlock.presets.researcher
import data.airlock.testing as t

test_github_search_allowed if {
	d := researcher.decision with input as t.req_q("/usr/bin/gh", "GET", "api.github.com", "/search/code", {"q": ["x"]})
	d.allow
	d.rule == "github-search"
}

test_github_write_denied if {
	d := researcher.decision with input as t.req("/usr/bin/gh", "POST", "api.github.com", "/repos/o/r/issues")
	d.reason == "method_not_allowed"
}

test_github_other_api_denied if {
	d := researcher.decision with input as t.req("/usr/bin/gh", "GET", "api.github.com", "/user/keys")
	d.reason == "path_not_allowed"
}

test_model_allowed if {
	d := researcher.decision with input as t.req(t.node, "POST", "api.anthropic.com", "/v1/messages")
	d.allow
}

test_curl_denied if {
	d := researcher.decision with input as t.conn(t.curl, "api.github.com", 443)
	d.reason == "binary_not_allowed"
}

test_clone_denied if {
	d := researcher.decision with input as t.conn(t.git, "github.com", 443)
	d.reason == "host_not_allowed"
}

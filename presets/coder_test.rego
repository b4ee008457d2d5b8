package airlock.presets.coder_test

import data.airlock.presets.coder
import data.airlock.testing as t

test_model_api_allowed_and_key_injected if {
	d := coder.decision with input as t.req(t.node, "POST", "api.anthropic.com", "/v1/messages")
	d.allow
	d.rule == "anthropic-api"
	d.inject["x-api-key"].env == "ANTHROPIC_API_KEY"
}

test_model_api_is_inspected if {
	d := coder.decision with input as t.conn(t.node, "api.anthropic.com", 443)
	d.allow
	d.inspect
}

test_registries_read_only if {
	d := coder.decision with input as t.req(t.node, "GET", "registry.npmjs.org", "/left-pad")
	d.allow
	p := coder.decision with input as t.req(t.node, "PUT", "registry.npmjs.org", "/left-pad")
	p.reason == "method_not_allowed"
}

test_registry_only_for_its_client if {
	d := coder.decision with input as t.req(t.curl, "GET", "registry.npmjs.org", "/left-pad")
	d.reason == "binary_not_allowed"
	p := coder.decision with input as t.req(t.python, "GET", "files.pythonhosted.org", "/packages/x.whl")
	p.allow
}

test_clone_allowed if {
	d := coder.decision with input as t.req_q(t.git, "GET", "github.com", "/o/r.git/info/refs", t.upload_pack)
	d.allow
	p := coder.decision with input as t.req(t.git, "POST", "github.com", "/o/r.git/git-upload-pack")
	p.allow
}

test_push_denied if {
	d := coder.decision with input as t.req_q(t.git, "GET", "github.com", "/o/r.git/info/refs", t.receive_pack)
	d.reason == "denied_by_rule"
	p := coder.decision with input as t.req(t.git, "POST", "github.com", "/o/r.git/git-receive-pack")
	p.reason == "denied_by_rule"
	p.rule == "no-git-push"
}

test_unknown_host_denied if {
	d := coder.decision with input as t.conn(t.node, "evil.example", 443)
	d.allow == false
	d.reason == "host_not_allowed"
}

package airlock.presets.writer_test

import data.airlock.presets.writer
import data.airlock.testing as t

test_model_allowed if {
	d := writer.decision with input as t.req(t.node, "POST", "api.anthropic.com", "/v1/messages")
	d.allow
}

test_model_admin_path_denied if {
	d := writer.decision with input as t.req(t.node, "POST", "api.anthropic.com", "/admin/keys")
	d.reason == "path_not_allowed"
}

test_publishing_denied if {
	d := writer.decision with input as t.conn(t.node, "smtp.gmail.com", 465)
	d.reason == "host_not_allowed"
	g := writer.decision with input as t.conn(t.node, "api.github.com", 443)
	g.reason == "host_not_allowed"
}

test_other_binary_denied if {
	d := writer.decision with input as t.conn(t.python, "api.anthropic.com", 443)
	d.reason == "binary_not_allowed"
}

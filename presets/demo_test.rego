package airlock.presets.demo_test

import data.airlock.presets.demo
import data.airlock.testing as t

model_req(exe, method, path) := object.union(t.req(exe, method, "api.model.test", path), {"request": {"port": 18443}})

test_models_and_chat_allowed if {
	m := demo.decision with input as model_req(t.python, "GET", "/v1/models")
	m.allow
	c := demo.decision with input as model_req(t.python, "POST", "/v1/chat/completions")
	c.allow
}

test_connect_inspected if {
	d := demo.decision with input as t.conn(t.python, "api.model.test", 18443)
	d.allow
	d.inspect
}

test_other_path_denied if {
	d := demo.decision with input as model_req(t.python, "POST", "/v1/admin/keys")
	d.reason == "path_not_allowed"
}

test_other_port_denied if {
	d := demo.decision with input as t.conn(t.python, "api.model.test", 443)
	d.reason == "port_not_allowed"
}

test_node_denied if {
	d := demo.decision with input as t.conn(t.node, "api.model.test", 18443)
	d.reason == "binary_not_allowed"
}

test_other_host_denied if {
	d := demo.decision with input as t.conn(t.python, "api.openai.com", 443)
	d.reason == "host_not_allowed"
}

test_methods_bound_to_their_paths if {
	list := demo.decision with input as model_req(t.python, "POST", "/v1/models")
	not list.allow
	chat := demo.decision with input as model_req(t.python, "GET", "/v1/chat/completions")
	not chat.allow
}

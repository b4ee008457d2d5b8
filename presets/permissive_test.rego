package airlock.presets.permissive_test

import data.airlock.presets.permissive
import data.airlock.testing as t

test_any_binary_any_host_tunnelled if {
	d := permissive.decision with input as t.conn("/tmp/anything", "example.org", 443)
	d.allow
	not d.inspect
	h := permissive.decision with input as t.conn(t.curl, "example.org", 80)
	h.allow
}

test_other_ports_denied if {
	d := permissive.decision with input as t.conn(t.curl, "example.org", 22)
	d.reason == "port_not_allowed"
}

test_plain_websocket_allowed if {
	ws := object.union(t.req(t.node, "GET", "example.org", "/socket"), {"request": {"port": 80, "upgrade": "websocket"}})
	d := permissive.decision with input as ws
	d.allow
}

package airlock.presets.strict_test

import data.airlock.presets.strict
import data.airlock.testing as t

test_everything_denied if {
	every i in [
		t.conn(t.curl, "api.github.com", 443),
		t.conn(t.node, "registry.npmjs.org", 443),
		t.req(t.git, "GET", "github.com", "/"),
	] {
		d := strict.decision with input as i
		d.allow == false
		d.reason == "host_not_allowed"
	}
}

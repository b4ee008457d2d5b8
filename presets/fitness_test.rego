package airlock.presets.fitness_test

import data.airlock.presets.fitness
import data.airlock.testing as t

test_model_allowed if {
	d := fitness.decision with input as t.req(t.node, "POST", "api.anthropic.com", "/v1/messages")
	d.allow
}

test_everything_else_denied if {
	d := fitness.decision with input as t.conn(t.node, "api.github.com", 443)
	d.reason == "host_not_allowed"
	p := fitness.decision with input as t.conn(t.node, "api.openai.com", 443)
	p.reason == "host_not_allowed"
}

package airlock.presets.codex_test

import data.airlock.presets.codex
import data.airlock.testing as t

_codex := "/usr/local/lib/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex"

test_openai_allowed_and_key_injected if {
	d := codex.decision with input as t.req(_codex, "POST", "api.openai.com", "/v1/responses")
	d.allow
	d.inject.authorization.env == "OPENAI_API_KEY"
}

test_nvidia_fallback_allowed if {
	d := codex.decision with input as t.req(_codex, "POST", "integrate.api.nvidia.com", "/v1/chat/completions")
	d.allow
	d.rule == "nvidia-api"
}

test_node_cannot_use_codex_rules if {
	d := codex.decision with input as t.conn(t.node, "api.openai.com", 443)
	d.reason == "binary_not_allowed"
}

test_anthropic_denied if {
	d := codex.decision with input as t.conn(_codex, "api.anthropic.com", 443)
	d.reason == "host_not_allowed"
}

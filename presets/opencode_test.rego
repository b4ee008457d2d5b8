package airlock.presets.opencode_test

import data.airlock.presets.opencode
import data.airlock.testing as t

_opencode := "/usr/local/lib/node_modules/opencode-ai/node_modules/opencode-linux-x64/bin/opencode"

test_providers_allowed if {
	every host in ["api.openai.com", "api.anthropic.com", "integrate.api.nvidia.com"] {
		d := opencode.decision with input as t.req(_opencode, "POST", host, "/v1/chat/completions")
		d.allow
	}
	o := opencode.decision with input as t.req(_opencode, "POST", "openrouter.ai", "/api/v1/chat/completions")
	o.allow
}

test_unlisted_provider_denied if {
	d := opencode.decision with input as t.conn(_opencode, "api.mistral.ai", 443)
	d.reason == "host_not_allowed"
}

test_other_binary_denied if {
	d := opencode.decision with input as t.conn(t.curl, "api.openai.com", 443)
	d.reason == "binary_not_allowed"
}

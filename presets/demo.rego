# demo: the shim of the demo pod (`airlock up` with no manifest). python3
# may call the stand-in model API, which the demo serves on loopback and
# pins with resolve + allow_range: list and chat, nothing else. `.test` is a
# reserved name, never resolved on the internet.
package airlock.presets.demo

import data.airlock.common
import data.airlock.lib

# Two rules: one rule's methods apply to each of its paths, and POST
# /v1/models or GET /v1/chat/completions is neither list nor chat.
rules := [
	{
		"name": "demo-model-list",
		"binaries": common.python,
		"hosts": ["api.model.test"],
		"ports": [18443],
		"methods": ["GET"],
		"paths": ["/v1/models"],
	},
	{
		"name": "demo-model-chat",
		"binaries": common.python,
		"hosts": ["api.model.test"],
		"ports": [18443],
		"methods": ["POST"],
		"paths": ["/v1/chat/completions"],
	},
]

denies := []

decision := lib.decide(rules, denies)

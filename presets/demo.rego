# demo: the shim of the demo pod (`airlock up` with no manifest). python3
# may call the stand-in model API, which the demo serves on loopback and
# pins with resolve + allow_range: list and chat, nothing else. `.test` is a
# reserved name, never resolved on the internet.
package airlock.presets.demo

import data.airlock.common
import data.airlock.lib

rules := [{
	"name": "demo-model-api",
	"binaries": common.python,
	"hosts": ["api.model.test"],
	"ports": [18443],
	"methods": ["GET", "POST"],
	"paths": ["/v1/models", "/v1/chat/completions"],
}]

denies := []

decision := lib.decide(rules, denies)

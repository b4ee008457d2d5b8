# permissive: any executable may open a tunnel to any public host on 80/443,
# WebSockets over plain HTTP included. Nothing is inspected; the proxy's SSRF
# guard still refuses private, loopback and metadata addresses. For trusted
# work only.
package airlock.presets.permissive

import data.airlock.lib

rules := [{
	"name": "any-public-web",
	"binaries": [{"path": "/**"}],
	"hosts": ["*"],
	"ports": [80, 443],
	"websocket": true,
}]

denies := []

decision := lib.decide(rules, denies)

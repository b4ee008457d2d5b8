# Input builders for the preset tests. Inputs are written as the engine hands
# them to Rego: canonical host, normalised path, upper-case method.
package airlock.testing

conn(exe, host, port) := {
	"process": {"exe": exe, "sha256": "0000"},
	"request": {"phase": "connect", "host": host, "port": port},
}

req(exe, method, host, path) := req_q(exe, method, host, path, {})

req_q(exe, method, host, path, query) := {
	"process": {"exe": exe, "sha256": "0000"},
	"request": {
		"phase": "request", "host": host, "port": 443,
		"method": method, "path": path, "query": query,
	},
}

node := "/usr/bin/node"

curl := "/usr/bin/curl"

git := "/usr/lib/git-core/git-remote-http"

python := "/usr/bin/python3.11"

upload_pack := {"service": ["git-upload-pack"]}

receive_pack := {"service": ["git-receive-pack"]}

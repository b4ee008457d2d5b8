# Input builders for the preset tests. Inputs are written as the engine hands
# them to Rego: canonical host, normalised path, upper-case method.
package airlock.testing

conn(exe, host, port) := {
	"sandbox": {"id": "test", "kind": "test"},
	"process": {"pid": 100, "exe": exe, "sha256": "0000", "uid": 998, "ancestors": []},
	"request": {"phase": "connect", "scheme": "https", "host": host, "port": port, "inspected": false},
}

req(exe, method, host, path) := req_q(exe, method, host, path, {})

req_q(exe, method, host, path, query) := {
	"sandbox": {"id": "test", "kind": "test"},
	"process": {"pid": 100, "exe": exe, "sha256": "0000", "uid": 998, "ancestors": []},
	"request": {
		"phase": "request", "scheme": "https", "host": host, "port": 443,
		"method": method, "path": path, "query": query, "headers": {}, "inspected": true,
	},
}

node := "/usr/bin/node"

curl := "/usr/bin/curl"

git := "/usr/lib/git-core/git-remote-http"

python := "/usr/bin/python3.11"

upload_pack := {"service": ["git-upload-pack"]}

receive_pack := {"service": ["git-receive-pack"]}

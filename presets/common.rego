# Building blocks the presets share: which executables are which tool, and
# the endpoints several kinds use. Identity is the kernel's /proc/<pid>/exe,
# so list the real file, not a symlink: python3 is /usr/bin/python3.11, and
# git speaks HTTPS through /usr/lib/git-core/git-remote-http.
package airlock.common

# Executables, by tool. Pin a sha256 ({"path": ..., "sha256": ...}) where the
# operator controls the image; paths alone trust whatever file is there.
git := [{"path": "/usr/lib/git-core/git-remote-http"}]

curl := [{"path": "/usr/bin/curl"}]

node := [{"path": "/usr/bin/node"}, {"path": "/usr/local/bin/node"}]

python := [{"path": "/usr/bin/python3.*"}, {"path": "/usr/local/bin/python3.*"}]

go := [{"path": "/usr/local/go/bin/go"}, {"path": "/usr/lib/go-*/bin/go"}]

gh := [{"path": "/usr/bin/gh"}, {"path": "/usr/local/bin/gh"}]

# No path here is one a sandbox could write: a path the agent can write
# (its home) is whatever file it puts there. A native install in a home
# (~/.local/share/claude/versions/, ~/.opencode/bin/) needs the operator's
# rule, pinned by sha256.

# Claude Code: the npm install runs under node, the native install is one file.
claude := array.concat(node, [{"path": "/usr/local/bin/claude"}])

# The pi coding agent is an npm package: node is the process.
pi := node

# The npm packages of codex and opencode ship native executables.
codex := [{"path": "/usr/local/lib/node_modules/@openai/codex/**/codex"}]

opencode := [{"path": "/usr/local/lib/node_modules/opencode-ai/**/opencode"}]

# Model APIs. The key is injected by the proxy from its own environment, so the
# agent never holds it; if the proxy lacks it the request is refused.
anthropic_api(binaries) := {
	"name": "anthropic-api",
	"binaries": binaries,
	"hosts": ["api.anthropic.com"],
	"methods": ["GET", "POST"],
	"paths": ["/v1/**"],
	"inject": {"x-api-key": {"env": "ANTHROPIC_API_KEY"}},
}

openai_api(binaries) := {
	"name": "openai-api",
	"binaries": binaries,
	"hosts": ["api.openai.com"],
	"methods": ["GET", "POST"],
	"paths": ["/v1/**"],
	"inject": {"authorization": {"env": "OPENAI_API_KEY", "format": "Bearer %s"}},
}

nvidia_api(binaries) := {
	"name": "nvidia-api",
	"binaries": binaries,
	"hosts": ["integrate.api.nvidia.com"],
	"methods": ["GET", "POST"],
	"paths": ["/v1/**"],
	"inject": {"authorization": {"env": "NVIDIA_API_KEY", "format": "Bearer %s"}},
}

# Package registries, read-only, each for its own client.
registries := [
	{
		"name": "npm-registry",
		"binaries": node,
		"hosts": ["registry.npmjs.org"],
		"methods": "read-only",
	},
	{
		"name": "pypi",
		"binaries": python,
		"hosts": ["pypi.org", "files.pythonhosted.org"],
		"methods": "read-only",
	},
	{
		"name": "go-modules",
		"binaries": go,
		"hosts": ["proxy.golang.org", "sum.golang.org"],
		"methods": "read-only",
	},
]

# Clone and fetch from GitHub over git smart-HTTP: ref discovery for
# upload-pack, then the pack request. Push (git-receive-pack) matches neither.
github_fetch := [
	{
		"name": "github-git-refs",
		"binaries": git,
		"hosts": ["github.com"],
		"methods": ["GET"],
		"paths": ["/*/*/info/refs"],
		"query": {"service": ["git-upload-pack"]},
	},
	{
		"name": "github-git-upload-pack",
		"binaries": git,
		"hosts": ["github.com"],
		"methods": ["POST"],
		"paths": ["/*/*/git-upload-pack"],
	},
]

# Push is denied outright on these hosts, whatever an allow rule says.
deny_git_push(hosts) := [
	{
		"name": "no-git-push",
		"hosts": hosts,
		"paths": ["/**/git-receive-pack"],
	},
	{
		"name": "no-git-push-discovery",
		"hosts": hosts,
		"paths": ["/**/info/refs"],
		"query": {"service": ["git-receive-pack"]},
	},
]

# The GitHub REST API, read-only.
github_api_read(binaries) := {
	"name": "github-api-read",
	"binaries": binaries,
	"hosts": ["api.github.com"],
	"methods": "read-only",
}

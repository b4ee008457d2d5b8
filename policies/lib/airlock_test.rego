# Tests of the matching semantics every preset relies on.
package airlock.lib_test

import data.airlock.lib

# --- path globs: "*" is one segment, "**" is recursive -----------------------

test_path_exact if lib.path_match("/v1/models", "/v1/models")

test_path_star_is_one_segment if {
	lib.path_match("/v1/*", "/v1/models")
	not lib.path_match("/v1/*", "/v1/admin/secrets")
	not lib.path_match("/v1/*", "/v2/models")
}

test_path_doublestar_is_recursive if {
	lib.path_match("/v1/**", "/v1/admin/secrets")
	lib.path_match("/v1/**", "/v1/a")
	lib.path_match("/v1/**", "/v1")
	not lib.path_match("/v1/**", "/v10/a")
	lib.path_match("/**", "/")
	lib.path_match("/**", "/anything/at/all")
}

test_path_doublestar_in_the_middle if {
	lib.path_match("/repos/**/git-receive-pack", "/repos/a/b/git-receive-pack")
	lib.path_match("/**/git-receive-pack", "/git-receive-pack")
	not lib.path_match("/**/git-receive-pack", "/a/git-upload-pack")
}

test_path_star_within_segment if {
	lib.path_match("/*/*.git/info/refs", "/o/r.git/info/refs")
	not lib.path_match("/*/*.git/info/refs", "/o/r/info/refs")
	not lib.path_match("/*/*.git/info/refs", "/o/a/r.git/info/refs")
}

# --- hosts: "*.x" is strict subdomains only -----------------------------------

test_host_exact if {
	lib.host_match("api.github.com", "api.github.com")
	not lib.host_match("api.github.com", "api.github.com.evil.com")
	not lib.host_match("github.com", "evilgithub.com")
}

test_host_wildcard_is_strict_subdomain if {
	lib.host_match("*.github.com", "api.github.com")
	lib.host_match("*.github.com", "a.b.github.com")
	not lib.host_match("*.github.com", "github.com")
	not lib.host_match("*.github.com", "evilgithub.com")
	not lib.host_match("*.github.com", "github.com.evil.com")
}

test_host_any if lib.host_match("*", "example.org")

# --- methods --------------------------------------------------------------

test_method_sets if {
	lib.method_allowed("read-only", "GET")
	lib.method_allowed("read-only", "HEAD")
	not lib.method_allowed("read-only", "POST")
	lib.method_allowed("read-write", "POST")
	not lib.method_allowed("read-write", "DELETE")
	lib.method_allowed("full", "DELETE")
	lib.method_allowed(["GET", "POST"], "POST")
	not lib.method_allowed(["GET"], "PUT")
	not lib.method_allowed("no-such-set", "GET")
}

# --- decide: deny by default, denies win, reasons name the failed condition --

_rules := [
	{
		"name": "api-read",
		"binaries": [{"path": "/usr/bin/curl"}],
		"hosts": ["api.example.com"],
		"methods": "read-only",
		"paths": ["/v1/**"],
	},
	{
		"name": "pinned-tool",
		"binaries": [{"path": "/opt/tool", "sha256": "abc"}],
		"hosts": ["tool.example.com"],
	},
	{
		"name": "plain-http",
		"binaries": [{"path": "/usr/bin/curl"}],
		"hosts": ["mirror.example.com"],
		"ports": [80],
	},
]

_denies := [{"name": "no-admin", "hosts": ["api.example.com"], "paths": ["/v1/admin/**"]}]

_req(exe, sha, host, port, method, path) := {
	"process": {"exe": exe, "sha256": sha},
	"request": {
		"phase": "request", "host": host, "port": port,
		"method": method, "path": path, "query": {},
	},
}

_conn(exe, sha, host, port) := {
	"process": {"exe": exe, "sha256": sha},
	"request": {"phase": "connect", "host": host, "port": port},
}

test_empty_policy_denies if {
	d := lib.decide([], []) with input as _conn("/usr/bin/curl", "x", "api.example.com", 443)
	d.allow == false
	d.reason == "host_not_allowed"
}

test_allowed_request if {
	d := lib.decide(_rules, _denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/v1/models")
	d.allow
	d.rule == "api-read"
}

test_connect_to_restricted_host_is_inspected if {
	d := lib.decide(_rules, _denies) with input as _conn("/usr/bin/curl", "x", "api.example.com", 443)
	d.allow
	d.inspect
}

test_connect_to_unrestricted_host_is_tunnelled if {
	d := lib.decide(_rules, _denies) with input as _conn("/opt/tool", "abc", "tool.example.com", 443)
	d.allow
	not d.inspect
}

test_reasons_name_the_failed_condition if {
	every c in [
		[_req("/usr/bin/curl", "x", "evil.com", 443, "GET", "/"), "host_not_allowed", ""],
		[_req("/usr/bin/curl", "x", "api.example.com", 8443, "GET", "/v1/a"), "port_not_allowed", "api-read"],
		[_req("/usr/bin/wget", "x", "api.example.com", 443, "GET", "/v1/a"), "binary_not_allowed", "api-read"],
		[_req("/opt/tool", "def", "tool.example.com", 443, "GET", "/"), "hash_mismatch", "pinned-tool"],
		[_req("/usr/bin/curl", "x", "api.example.com", 443, "POST", "/v1/a"), "method_not_allowed", "api-read"],
		[_req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/v2/a"), "path_not_allowed", "api-read"],
		[_req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/v1/admin/keys"), "denied_by_rule", "no-admin"],
	] {
		d := lib.decide(_rules, _denies) with input as c[0]
		d.allow == false
		d.reason == c[1]
		d.rule == c[2]
	}
}

test_deny_wins_over_allow if {
	d := lib.decide(_rules, _denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/v1/admin/x")
	d.reason == "denied_by_rule"
}

test_default_port_is_443 if {
	d := lib.decide(_rules, _denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 80, "GET", "/v1/a")
	d.reason == "port_not_allowed"
	e := lib.decide(_rules, _denies) with input as _req("/usr/bin/curl", "x", "mirror.example.com", 80, "GET", "/x")
	e.allow
}

test_query_condition if {
	rules := [{
		"name": "clone",
		"binaries": [{"path": "/usr/lib/git-core/git-remote-http"}],
		"hosts": ["git.example.com"],
		"paths": ["/*/*/info/refs"],
		"query": {"service": ["git-upload-pack"]},
	}]
	base := _req("/usr/lib/git-core/git-remote-http", "x", "git.example.com", 443, "GET", "/o/r/info/refs")
	ok := lib.decide(rules, []) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-upload-pack"]}})})
	ok.allow
	bad := lib.decide(rules, []) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-receive-pack"]}})})
	bad.reason == "query_not_allowed"
	none := lib.decide(rules, []) with input as base
	none.reason == "query_not_allowed"
	mixed := lib.decide(rules, []) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-upload-pack", "git-receive-pack"]}})})
	mixed.reason == "query_not_allowed"

	# Another spelling a server may read as the param carries no other
	# value through; alone, it is not the param.
	every q in [
		{"service": ["git-upload-pack"], "Service": ["git-receive-pack"]},
		{"service": ["git-upload-pack"], "service[]": ["git-receive-pack"]},
		{"service": ["git-upload-pack"], "SERVICE[]": ["x"]},
		{"service": ["git-upload-pack"], "service[0]": ["git-receive-pack"]},
		{"service": ["git-upload-pack"], "service[x]": ["git-receive-pack"]},
		{"service": ["git-upload-pack"], "service[a][b]": ["git-receive-pack"]},
		{"service": ["git-upload-pack"], "service[0]x": ["git-receive-pack"]},
		{"service": ["git-upload-pack"], "[service]": ["git-receive-pack"]},
		{"SERVICE": ["git-upload-pack"]},
		{"service[0]": ["git-upload-pack"]},
	] {
		d := lib.decide(rules, []) with input as object.union(base, {"request": object.union(base.request, {"query": q})})
		d.reason == "query_not_allowed"
	}
	same := lib.decide(rules, []) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-upload-pack"], "Service[]": ["git-upload-pack"]}})})
	same.allow
}

test_deny_query_any_value if {
	rules := [{"name": "git", "binaries": [{"path": "/usr/lib/git-core/git-remote-http"}], "hosts": ["git.example.com"]}]
	denies := [{"name": "no-push", "hosts": ["git.example.com"], "query": {"service": ["git-receive-pack"]}}]
	base := _req("/usr/lib/git-core/git-remote-http", "x", "git.example.com", 443, "GET", "/o/r/info/refs")
	mixed := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-upload-pack", "git-receive-pack"]}})})
	mixed.reason == "denied_by_rule"
	fetch := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-upload-pack"]}})})
	fetch.allow
	every q in [{"Service": ["git-receive-pack"]}, {"service[]": ["git-receive-pack"]}, {"service": ["git-receive-pack "]}, {"SERVICE": ["Git-Receive-Pack"]}] {
		d := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": q})})
		d.reason == "denied_by_rule"
	}

	# An index after the name is the name to PHP and qs, and a leading
	# bracket is the name to qs.
	every q in [{"service[0]": ["git-receive-pack"]}, {"service[x]": ["git-receive-pack"]}, {"Service[a][b]": ["git-receive-pack"]}, {"service[0]x": ["git-receive-pack"]}, {"[service]": ["git-receive-pack"]}, {" service[]": ["git-receive-pack"]}] {
		d := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": q})})
		d.reason == "denied_by_rule"
	}

	# A bracket that closes nothing ends no name.
	every q in [{"service[": ["git-receive-pack"]}, {"service]": ["git-receive-pack"]}, {"ser[vice": ["git-receive-pack"]}] {
		d := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": q})})
		d.allow
	}

	# As PHP names params: "." and " " are "_", and so is a "[" that
	# closes nothing; leading spaces go.
	dry := [{"name": "no-dry-run", "hosts": ["git.example.com"], "query": {"dry_run": ["false"]}}]
	every q in [{"dry_run": ["false"]}, {"dry.run": ["false"]}, {"dry run": ["false"]}, {" dry_run": ["false"]}, {"dry[run": ["false"]}] {
		d := lib.decide(rules, dry) with input as object.union(base, {"request": object.union(base.request, {"query": q})})
		d.reason == "denied_by_rule"
	}
}

# Within an allow rule a pinned entry wins over an unpinned one matching
# the same path, whatever their order: the glob beside a pin does not let
# another file at the pinned path through. Paths no pinned entry matches
# go by the unpinned entries. In a deny rule, any entry denies.
test_pinned_binary_wins_over_unpinned_in_an_allow_rule if {
	gh := {"path": "/usr/bin/gh", "sha256": "aa"}
	every bins in [[gh, {"path": "/usr/bin/*"}], [{"path": "/usr/bin/*"}, gh], [{"path": "/usr/bin/gh"}, gh]] {
		rules := [{"name": "t", "binaries": bins, "hosts": ["h.example"]}]
		other := lib.decide(rules, []) with input as _conn("/usr/bin/gh", "bb", "h.example", 443)
		other.reason == "hash_mismatch"
		other.rule == "t"
		pinned := lib.decide(rules, []) with input as _conn("/usr/bin/gh", "aa", "h.example", 443)
		pinned.allow
		x := lib.explain(rules, []) with input as _conn("/usr/bin/gh", "bb", "h.example", 443)
		[c.check | some c in x.rules[0].checks; not c.ok] == ["sha256"]
	}

	# A path only the glob matches needs no digest.
	rules := [{"name": "t", "binaries": [gh, {"path": "/usr/bin/*"}], "hosts": ["h.example"]}]
	curl := lib.decide(rules, []) with input as _conn("/usr/bin/curl", "cc", "h.example", 443)
	curl.allow

	# A pinned glob pins every path it matches.
	tools := [{"name": "tools", "binaries": [{"path": "/opt/**", "sha256": ["aa", "bb"]}, {"path": "/opt/tool"}], "hosts": ["h.example"]}]
	tool := lib.decide(tools, []) with input as _conn("/opt/tool", "cc", "h.example", 443)
	tool.reason == "hash_mismatch"
	ok := lib.decide(tools, []) with input as _conn("/opt/tool", "bb", "h.example", 443)
	ok.allow

	# Within the rule only: rules are OR'd, and another rule's glob
	# allows the file at the pinned path what that rule allows.
	two := [rules[0], {"name": "any", "binaries": [{"path": "/usr/bin/*"}], "hosts": ["h.example"]}]
	other_rule := lib.decide(two, []) with input as _conn("/usr/bin/gh", "bb", "h.example", 443)
	other_rule.allow
	other_rule.rule == "any"

	# A deny rule's entries each deny.
	denies := [{"name": "no-gh", "hosts": ["h.example"], "binaries": [gh, {"path": "/usr/bin/*"}]}]
	denied := lib.decide([{"name": "any", "binaries": [{"path": "/**"}], "hosts": ["h.example"]}], denies) with input as _conn("/usr/bin/gh", "bb", "h.example", 443)
	denied.reason == "denied_by_rule"
}

# A param's name and a deny rule's value are folded as a deny rule's path
# is: a server that compares them ignoring case by upper-casing reads
# ?ſervice= as ?SERVICE= and gıt-receıve-pack as git-receive-pack. The
# name is folded before its index is read: ſervice［0］ is service[0] to
# a server that maps fullwidth forms to ASCII.
test_query_names_and_deny_values_fold_non_ascii_letters if {
	rules := [{"name": "git", "binaries": [{"path": "/usr/lib/git-core/git-remote-http"}], "hosts": ["git.example.com"]}]
	denies := [{"name": "no-push", "hosts": ["git.example.com"], "query": {"service": ["git-receive-pack"]}}]
	base := _req("/usr/lib/git-core/git-remote-http", "x", "git.example.com", 443, "GET", "/o/r/info/refs")
	every q in [
		{"\u017fervice": ["git-receive-pack"]}, {"SERV\u0131CE": ["git-receive-pack"]}, {"\u017fervice[0]": ["git-receive-pack"]},
		{"\uff53\uff45\uff52\uff56\uff49\uff43\uff45": ["git-receive-pack"]},
		{"\u017fervice\uff3b0\uff3d": ["git-receive-pack"]}, {"\uff3bservice\uff3d": ["git-receive-pack"]},
		{"service": ["g\u0131t-rece\u0131ve-pack"]}, {"service": ["\uff47\uff49\uff54-receive-pack"]},
	] {
		d := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": q})})
		d.reason == "denied_by_rule"
	}
	fetch := lib.decide(rules, denies) with input as object.union(base, {"request": object.union(base.request, {"query": {"\u017fervice": ["git-upload-pack"]}})})
	fetch.allow

	# An allow rule's condition: every value under a folded spelling of
	# the name must be allowed too.
	clone := [object.union(rules[0], {"name": "clone", "query": {"service": ["git-upload-pack"]}})]
	mixed := lib.decide(clone, []) with input as object.union(base, {"request": object.union(base.request, {"query": {"service": ["git-upload-pack"], "\u017fervice": ["git-receive-pack"]}})})
	mixed.reason == "query_not_allowed"
}

# A deny path matches as a Windows server (IIS) reads a path too: each
# segment without its trailing dots and spaces.
test_deny_path_windows_segments if {
	rules := [{"name": "api", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["api.example.com"]}]
	denies := [{"name": "no-admin", "hosts": ["api.example.com"], "paths": ["/repos/*/admin/**"]}]
	every p in ["/repos/x/admin/y", "/repos/x/admin./y", "/repos/x/admin /y", "/repos/x/Admin.. /y"] {
		d := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", p)
		d.reason == "denied_by_rule"
	}
	ok := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/repos/x/administrator/y")
	ok.allow

	# Read so, with a trailing slash as without one.
	refs := [{"name": "no-refs", "hosts": ["api.example.com"], "paths": ["/o/info/refs"]}]
	every p in ["/o/info/refs./", "/o/info/refs /", "/O/INFO/REFS./", "/o/info/refs.", "/o/info/refs/"] {
		d := lib.decide(rules, refs) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", p)
		d.reason == "denied_by_rule"
	}
}

# A deny pattern written with a trailing slash denies the path without
# one, as a pattern without one denies the path with it.
test_deny_path_pattern_trailing_slash if {
	rules := [{"name": "api", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["api.example.com"]}]
	denies := [{"name": "no-slash", "hosts": ["api.example.com"], "paths": ["/slash/", "/", "/admin/**/"]}]
	every p in ["/slash", "/slash/", "/SLASH/", "/", "/admin", "/admin/", "/admin/x"] {
		d := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", p)
		d.reason == "denied_by_rule"
	}
	ok := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/slashes")
	ok.allow
}

test_sha256_list if {
	rules := [{"name": "t", "binaries": [{"path": "/opt/t", "sha256": ["a", "b"]}], "hosts": ["h.example"]}]
	d := lib.decide(rules, []) with input as _conn("/opt/t", "b", "h.example", 443)
	d.allow
	e := lib.decide(rules, []) with input as _conn("/opt/t", "c", "h.example", 443)
	e.reason == "hash_mismatch"
}

test_explain_lists_checks if {
	e := lib.explain(_rules, _denies) with input as _req("/usr/bin/wget", "x", "api.example.com", 443, "GET", "/v1/a")
	e.rules[0].rule == "api-read"
	[c.check | some c in e.rules[0].checks] == ["host", "port", "binary", "sha256", "method", "path", "query", "websocket"]
	e.rules[0].checks[0].ok
	e.rules[0].checks[2] == {"check": "binary", "ok": false, "got": "/usr/bin/wget", "allows": ["/usr/bin/curl"]}
	e.rules[1].checks[0].ok == false
}

test_explain_checks_websocket if {
	ws := object.union(_req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/v1/a"), {"request": {"upgrade": "websocket"}})
	lib.decide(_rules, _denies).reason == "websocket_not_allowed" with input as ws
	e := lib.explain(_rules, _denies) with input as ws
	[c.check | some c in e.rules[0].checks; not c.ok] == ["websocket"]
}

test_deny_paths_fold_case_and_trailing_slash if {
	rules := [{"name": "api", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["api.example.com"]}]
	denies := [{"name": "no-admin", "hosts": ["api.example.com"], "paths": ["/admin/**", "/api/delete"]}]
	every path in ["/admin/users", "/ADMIN/users", "/Admin", "/api/delete", "/api/delete/", "/API/Delete/"] {
		d := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", path)
		d.reason == "denied_by_rule"
	}
	ok := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", "/api/deleted")
	ok.allow
}

# Letters that are ASCII ones once upper-cased (ſ is S, ı is I; ß is SS
# and ﬁ FI with full case mapping) or lower-cased (İ is i, the Kelvin sign
# k) deny as those: a server that folds case by upper-casing serves
# /ſecrets as /secrets.
test_deny_paths_fold_non_ascii_letters_to_ascii if {
	rules := [{"name": "api", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["api.example.com"]}]
	denies := [{"name": "no-secrets", "hosts": ["api.example.com"], "paths": ["/secrets/**", "/admin/**", "/access/*", "/profile", "/kube/**", "/\ufb01le/**"]}]
	every path in [
		"/\u017fecrets/x", "/SECRET\u017f", "/adm\u0131n/x", "/ADM\u0130N/x", "/acce\u00df/x", "/ACCE\u1e9e/x",
		"/pro\ufb01le", "/\u212aube/x", "/\u212aUBE", "/file/x", "/adm\u0131n./x",
		# Fullwidth ASCII and look-alike slashes, as NFKC makes them.
		"/\uff41\uff44\uff4d\uff49\uff4e/x", "/\uff21\uff24\uff2d\uff29\uff2e/x", "/admin\uff0fx", "/admin\u2215x", "/admin\uff3cx",
	] {
		d := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", path)
		d.reason == "denied_by_rule"
	}

	# A path no deny names passes, whatever its letters.
	every path in ["/wiki/K\u0131rm\u0131z\u0131", "/stra\u00dfe", "/\u017f"] {
		d := lib.decide(rules, denies) with input as _req("/usr/bin/curl", "x", "api.example.com", 443, "GET", path)
		d.allow
	}
}

_ws(host, path) := object.union(_req("/usr/bin/node", "x", host, 443, "GET", path), {"request": {"upgrade": "websocket"}})

test_websocket_needs_a_rule_that_says_so if {
	rules := [
		{"name": "read", "binaries": [{"path": "/usr/bin/node"}], "hosts": ["api.example.com"], "methods": "read-only"},
		{"name": "ws", "binaries": [{"path": "/usr/bin/node"}], "hosts": ["ws.example.com"], "methods": ["GET"], "paths": ["/socket"], "websocket": true},
	]
	read := lib.decide(rules, []) with input as _ws("api.example.com", "/v1")
	read.reason == "websocket_not_allowed"
	read.rule == "read"
	plain := lib.decide(rules, []) with input as _req("/usr/bin/node", "x", "api.example.com", 443, "GET", "/v1")
	plain.allow
	ok := lib.decide(rules, []) with input as _ws("ws.example.com", "/socket")
	ok.allow
	connect := lib.decide(rules, []) with input as _conn("/usr/bin/node", "x", "ws.example.com", 443)
	connect.inspect
}

test_deny_paths_read_an_encoded_slash_either_way if {
	rules := [{"name": "api", "binaries": [{"path": "/usr/bin/curl"}], "hosts": ["gitlab.example.com"]}]
	denies := [{"name": "no-settings", "hosts": ["gitlab.example.com"], "paths": ["/projects/*/settings"]}]
	both := object.union(_req("/usr/bin/curl", "x", "gitlab.example.com", 443, "GET", "/projects/a/b/settings"), {"request": {"slash_path": "/projects/a%2Fb/settings"}})
	d := lib.decide(rules, denies) with input as both
	d.reason == "denied_by_rule"
	other := object.union(_req("/usr/bin/curl", "x", "gitlab.example.com", 443, "GET", "/projects/a/b/issues"), {"request": {"slash_path": "/projects/a%2Fb/issues"}})
	ok := lib.decide(rules, denies) with input as other
	ok.allow
}

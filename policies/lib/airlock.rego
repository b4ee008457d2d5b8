# The airlock policy library: the matching helpers every preset shares, so a
# preset can be a plain list of rules that a reviewer reads top to bottom.
#
# A preset declares
#   rules  - allow rules; a connection or request is allowed when one matches
#   denies - deny rules; a match wins over every allow rule
# and sets `decision := lib.decide(rules, denies)`.
#
# Matching (README "Policy rules" has the full table):
#   hosts    "api.github.com" exact; "*.github.com" strict subdomains (any
#            depth, never the apex); "*" any host.
#   ports    list of ports; default [443].
#   binaries [{path, sha256?}]; path is exact or a path glob; sha256 pins the
#            executable (a digest or a list of accepted digests). Within
#            an allow rule a pinned entry wins over the rule's unpinned ones
#            for the paths it matches (another rule, OR'd with it, is not
#            bound by it); in a deny rule any entry that matches denies.
#   methods  "read-only" (GET HEAD OPTIONS), "read-write" (+ POST PUT PATCH),
#            "full" (any method), or an explicit list; default "full".
#   paths    path globs: "*" is exactly one segment, "**" any number of
#            segments (zero included); default ["/**"].
#   query    {param: [allowed values]}; every listed param must be present,
#            and each of its values allowed (in a deny rule: any value named
#            is enough to deny).
#   websocket true to allow WebSocket upgrades (a GET, then frames both ways
#            that no rule sees); without it a rule refuses them where the
#            proxy sees them (plain HTTP, inspected tunnels). An opaque
#            tunnel carries whatever it carries.
#   inspect  true to terminate TLS even when nothing below requires it.
#   inject   {header: {env|file, format?}}: the proxy adds the header.
# In a deny rule an absent hosts, ports, binaries, methods or paths means any;
# its paths match whatever the case, with or without a trailing slash.
#
# Inputs reach the policy already canonicalised by the engine (lower-case
# host without trailing dot, IDNA, dot-segments resolved, method upper-case).
package airlock.lib

method_sets := {
	"read-only": {"GET", "HEAD", "OPTIONS"},
	"read-write": {"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"},
}

# decide is the whole decision procedure.
decide(rules, denies) := decide_indexed(index(rules, denies))

# index is the constant part of deciding: defaults filled in, method sets
# expanded, rules grouped by host. It depends on no input, so the engine
# computes it once per policy generation and evaluates decide_indexed alone.
index(rules, denies) := {
	"rules": [_prep(r, false) | some r in rules],
	"denies": [_prep(d, true) | some d in denies],
	"allow_hosts": _host_index(rules),
	"deny_hosts": _host_index(denies),
}

# decide_indexed evaluates lazily: deny rules first, then the first allow
# rule that matches; the denial explanation is only computed on a denial.
decide_indexed(ix) := d if {
	i := _first([j | some j in _candidates(ix.deny_hosts); _deny_match(ix.denies[j])])
	d := {"allow": false, "inspect": false, "reason": "denied_by_rule", "rule": ix.denies[i].name, "inject": {}}
} else := d if {
	i := _first([j | some j in _candidates(ix.allow_hosts); _allow_match(ix.rules[j])])
	r := ix.rules[i]
	d := {"allow": true, "inspect": _inspect(r, ix), "reason": "allowed", "rule": r.name, "inject": r.inject}
} else := _denial(ix)

# explain reports, per allow rule, every check of _check_names in order:
# whether it held, what the input has and what the rule allows; and which
# deny rules matched. `airlock policy explain` renders it as it is, so the
# checks are listed here and nowhere else.
explain(rules, denies) := x if {
	ix := index(rules, denies)
	x := {
		"rules": [{"rule": r.name, "checks": _checks(r, rules[i])} | some i, r in ix.rules],
		"denies": [ix.denies[j].name | some j in _candidates(ix.deny_hosts); _deny_match(ix.denies[j])],
	}
}

# --- preparation (constant) ----------------------------------------------------

_prep(r, is_deny) := {
	"name": r.name,
	"ports": _ports(r, is_deny),
	"bins": _bins(r),
	"methods": _methods(object.get(r, "methods", "full")),
	"paths": _paths(object.get(r, "paths", ["/**"])),
	"query": object.get(r, "query", {}),
	"websocket": object.get(r, "websocket", false),
	"request_level": _request_level(r),
	"inspect": _self_inspect(r),
	"inject": object.get(r, "inject", {}),
}

_ports(r, _) := {p | some p in r.ports} if r.ports

_ports(r, true) := null if not r.ports

_ports(r, false) := {443} if not r.ports

_bins(r) := [_path_entry(b.path, _hashes(b)) | some b in r.binaries] if r.binaries

else := null

_hashes(b) := {b.sha256} if is_string(b.sha256)

else := {h | some h in b.sha256} if b.sha256

else := null

_methods("full") := null

_methods(name) := method_sets[name] if is_string(name)

_methods(list) := {m | some m in list} if is_array(list)

_paths(ps) := null if "/**" in ps

else := [_path_entry(p, null) | some p in ps]

# A "**" segment also matches zero segments: "/v1/**" matches "/v1" and
# "/**/x" matches "/x". glob.match's "**" needs its slashes, so each pattern
# carries the zero-segment alternative, with "/**" removed.
_path_entry(p, hashes) := {"path": p, "glob": contains(p, "*"), "alt": _alt(p), "hashes": hashes}

_alt(p) := replace(p, "/**", "") if {
	contains(p, "/**")
	p != "/**"
} else := null

# A connection is inspected (TLS terminated) when its rule asks for it or has
# conditions only visible inside TLS: methods, paths, query, injection.
_self_inspect(r) if r.inspect == true

else if _request_level(r)

else := false

default _request_level(_) := false

_request_level(r) if object.get(r, "methods", "full") != "full"

_request_level(r) if not object.get(r, "paths", ["/**"]) == ["/**"]

_request_level(r) if r.query

_request_level(r) if r.inject

_host_index(rs) := {
	"exact": {h: [i | some i, r in rs; h in r.hosts] |
		some r in rs
		some h in object.get(r, "hosts", [])
		not contains(h, "*")
	},
	"wild": [[substring(h, 1, -1), i] |
		some i, r in rs
		some h in object.get(r, "hosts", [])
		startswith(h, "*.")
	],
	"any": [i | some i, r in rs; _any_host(r)],
}

_any_host(r) if "*" in r.hosts

_any_host(r) if not r.hosts

# --- evaluation (per input) ----------------------------------------------------

_first(xs) := xs[0] if count(xs) > 0

# The rules whose hosts match, in rule order (first match wins).
_candidates(hi) := sort(array.concat(
	array.concat(object.get(hi.exact, input.request.host, []), [w[1] | some w in hi.wild; endswith(input.request.host, w[0])]),
	hi.any,
))

_allow_match(r) if {
	input.request.port in r.ports
	_bins_ok(r.bins)
	_request_ok(r)
}

_deny_match(d) if {
	_ports_ok(d.ports)
	_deny_bins_hit(d.bins)
	_deny_request(d)
}

# A deny rule that looks inside requests cannot match a CONNECT; it forces
# inspection instead (see _inspect).
_deny_request(d) if {
	input.request.phase == "connect"
	not d.request_level
}

_deny_request(d) if {
	input.request.phase == "request"
	_methods_ok(d.methods)
	_deny_paths_hit(d.paths)
	_query_hit(d.query)
}

# A deny rule's paths match whatever the case, with or without a trailing
# slash, and with an encoded slash read either way: servers that fold case
# (IIS), ignore the slash or keep a%2Fb one segment serve the same resource
# under those spellings, and a deny must hold for them all.
_deny_paths_hit(null) := true

_deny_paths_hit(ps) if {
	some p in ps
	some x in _folded_paths
	_match(_folded(p), x)
}

_folded_paths contains _fold(input.request.path)

_folded_paths contains _fold(trim_suffix(input.request.path, "/")) if input.request.path != "/"

# With an encoded slash, also as servers that keep a%2Fb one segment read it.
_folded_paths contains _fold(trim_suffix(input.request.slash_path, "/")) if input.request.slash_path != ""

_folded_paths contains _fold(input.request.slash_path) if input.request.slash_path != ""

# As a Windows server (IIS) reads it: each segment without its trailing
# dots and spaces (admin. and "admin " are admin there), with or without
# a trailing slash.
_folded_paths contains _iis_path

_folded_paths contains trim_suffix(_iis_path, "/") if _iis_path != "/"

_iis_path := concat("/", [trim_right(s, ". ") | some s in split(_fold(input.request.path), "/")])

# The pattern folded as the path is: case folded, and without a trailing
# slash (every path is matched without one too).
_folded(e) := object.union(e, {"path": _unslashed(_fold(e.path)), "alt": _unslashed(_fold(e.alt))}) if e.alt != null

else := object.union(e, {"path": _unslashed(_fold(e.path))})

# Case folded as servers that fold by upper-casing fold it: lower() maps
# İ and the Kelvin sign to ASCII, but ſ upper-cases to S and ı to I, and
# full case mapping (Java's and JavaScript's toUpperCase) makes ß SS and
# ﬁ FI: /ſecrets and /adm%C4%B1n are /SECRETS and /ADMIN there. Folded
# the same way on both sides, a deny only gains matches (paths have no
# character classes), so it holds for every such spelling. Refusing those
# paths instead would refuse honest ones (Turkish: /wiki/K%C4%B1rm%C4%B1z%C4%B1)
# under every preset, denied or not.
# An ASCII path, the common case, has nothing to fold but its case.
_fold(s) := lower(s) if regex.match(`^[[:ascii:]]*$`, s)

else := strings.replace_n(_case_folds, lower(s))

_case_folds := {
	"\u017f": "s", # ſ long s
	"\u0131": "i", # ı dotless i
	"\u00df": "ss", # ß sharp s (ẞ is ß once lower)
	"\ufb00": "ff",
	"\ufb01": "fi",
	"\ufb02": "fl",
	"\ufb03": "ffi",
	"\ufb04": "ffl",
	"\ufb05": "st",
	"\ufb06": "st",
	# Look-alike slashes (NFKC's, and Windows' best-fit): /public／secret
	# is /public/secret to a server that maps them. (The fullwidth ones
	# are below.)
	"\ufe68": "/",
	"\u2215": "/",
	"\u2044": "/",
	"\u2216": "/",
	"\u29f5": "/",
	"\u29f8": "/",
	"\u29f9": "/",
	# Fullwidth ASCII, which NFKC makes ASCII: /ａｄｍｉｎ is /admin there
	# (its capitals are small letters once lower()'s).
	"\uff01": "!",
	"\uff02": "\"",
	"\uff03": "#",
	"\uff04": "$",
	"\uff05": "%",
	"\uff06": "&",
	"\uff07": "'",
	"\uff08": "(",
	"\uff09": ")",
	"\uff0a": "*",
	"\uff0b": "+",
	"\uff0c": ",",
	"\uff0d": "-",
	"\uff0e": ".",
	"\uff0f": "/",
	"\uff10": "0",
	"\uff11": "1",
	"\uff12": "2",
	"\uff13": "3",
	"\uff14": "4",
	"\uff15": "5",
	"\uff16": "6",
	"\uff17": "7",
	"\uff18": "8",
	"\uff19": "9",
	"\uff1a": ":",
	"\uff1b": ";",
	"\uff1c": "<",
	"\uff1d": "=",
	"\uff1e": ">",
	"\uff1f": "?",
	"\uff20": "@",
	"\uff3b": "[",
	"\uff3c": "/", # a separator to Windows servers
	"\uff3d": "]",
	"\uff3e": "^",
	"\uff3f": "_",
	"\uff40": "`",
	"\uff41": "a",
	"\uff42": "b",
	"\uff43": "c",
	"\uff44": "d",
	"\uff45": "e",
	"\uff46": "f",
	"\uff47": "g",
	"\uff48": "h",
	"\uff49": "i",
	"\uff4a": "j",
	"\uff4b": "k",
	"\uff4c": "l",
	"\uff4d": "m",
	"\uff4e": "n",
	"\uff4f": "o",
	"\uff50": "p",
	"\uff51": "q",
	"\uff52": "r",
	"\uff53": "s",
	"\uff54": "t",
	"\uff55": "u",
	"\uff56": "v",
	"\uff57": "w",
	"\uff58": "x",
	"\uff59": "y",
	"\uff5a": "z",
	"\uff5b": "{",
	"\uff5c": "|",
	"\uff5d": "}",
	"\uff5e": "~",
}

_unslashed(p) := trim_suffix(p, "/") if p != "/"

else := p

_ports_ok(null) := true

_ports_ok(ps) if input.request.port in ps

# Within an allow rule, an entry with a sha256 wins over the rule's
# entries without one for the paths it matches: the executable must have
# one of its digests. Else [{"path": "/usr/bin/gh", "sha256": ...},
# {"path": "/usr/bin/*"}] would let any file at /usr/bin/gh through, the
# pin cancelled by the glob beside it. Entries without a sha256 speak for
# the paths no pinned entry matches. Within the rule only: rules are
# OR'd, so another rule with an unpinned entry for the path still allows
# any file there what that rule allows.
_bins_ok(null) := true

_bins_ok(bins) if {
	some b in bins
	b.hashes != null
	_match(b, input.process.exe)
	input.process.sha256 in b.hashes
}

_bins_ok(bins) if {
	not _pinned(bins)
	_bins_path_ok(bins)
}

_pinned(bins) if {
	some b in bins
	b.hashes != null
	_match(b, input.process.exe)
}

# In a deny rule every entry is one more thing to deny: any entry that
# matches (and, pinned, whose digest the executable has) denies. A pin
# there narrows its own entry only, never the entries beside it.
_deny_bins_hit(null) := true

_deny_bins_hit(bins) if {
	some b in bins
	_match(b, input.process.exe)
	_hash_ok(b.hashes)
}

_bins_path_ok(null) := true

_bins_path_ok(bins) if {
	some b in bins
	_match(b, input.process.exe)
}

_hash_ok(null) := true

_hash_ok(hs) if input.process.sha256 in hs

# Method, path and query are unknown when a CONNECT is decided; they are
# decided per request once the tunnel is inspected.
_request_ok(_) if input.request.phase == "connect"

_request_ok(r) if {
	input.request.phase == "request"
	_methods_ok(r.methods)
	_paths_ok(r.paths)
	_query_ok(r.query)
	_websocket_ok(r.websocket)
}

# A WebSocket upgrade is a GET, but what follows it goes both ways unseen:
# only a rule that says "websocket": true allows one.
_websocket_ok(_) if not input.request.upgrade == "websocket"

_websocket_ok(true) if input.request.upgrade == "websocket"

_methods_ok(null) := true

_methods_ok(ms) if input.request.method in ms

_paths_ok(null) := true

_paths_ok(ps) if {
	some p in ps
	_match(p, input.request.path)
}

# An allow rule's query condition holds when every listed param is present,
# spelt as listed, and every value of it is allowed: upstreams disagree on
# which of ?scope=read&scope=admin counts, so one allowed value must not
# carry the others through. Every value under a spelling a server may read
# as the param (any case, an index after the name: _param_key's) must be
# allowed too: ?mode=safe&MODE=unsafe is unsafe to ASP.NET, mode[]=unsafe
# and mode[0]=unsafe to PHP.
_query_ok(q) if {
	every k, allowed in q {
		count(object.get(input.request.query, k, [])) > 0
		every v in [v | some name, vs in input.request.query; _same_param(name, k); some v in vs] {
			v in allowed
		}
	}
}

_same_param(name, k) if _param_key(name) == _param_key(k)

# A param's name as servers read it: any case, folded as _fold folds a
# path (a server that compares names ignoring case by upper-casing reads
# ?ſervice= as ?SERVICE=); without the index PHP and
# qs read after it as an array's or object's (name[], name[0] and
# name[a][b] are all name there); and as PHP names it, without leading
# spaces, with "_" for ".", " " and a "[" no "]" follows (.method and
# debug[mode are _method and debug_mode there). Folded first: to a server
# that maps fullwidth forms to ASCII, ſervice［0］ is service[0] and
# dry．run dry.run, whose index and "." PHP then reads as any other's.
# policies.paramKey mirrors it, for hints.
_param_key(n) := replace(replace(replace(trim_left(_param_base(_fold(n)), " "), ".", "_"), " ", "_"), "[", "_")

# PHP and qs end a name at its first "[" that a "]" follows, whatever comes
# after (role[0]x is role to PHP); qs reads a leading [role] as role.
_param_base(n) := substring(n, 0, i) if {
	i := indexof(n, "[")
	i > 0
	contains(substring(n, i, -1), "]")
} else := substring(n, 1, indexof(n, "]") - 1) if {
	startswith(n, "[")
	indexof(n, "]") > 0
} else := n

# A deny rule's query condition hits when any value of every listed param
# is one it names, for the same reason, and under every spelling a server
# may read as that param and value: any case (ASP.NET), an index after
# the name (PHP, qs: _param_key), surrounding spaces. A value is folded
# as its name is: a server that compares it ignoring case by upper-casing
# (Java's equalsIgnoreCase) reads gıt-receıve-pack as git-receive-pack.
_query_hit(q) if {
	every k, denied in q {
		some name, vs in input.request.query
		_same_param(name, k)
		some v in vs
		_fold(trim_space(v)) in {_fold(d) | some d in denied}
	}
}

_match(e, x) if e.path == x

_match(e, x) if {
	e.glob
	glob.match(e.path, ["/"], x)
}

_match(e, x) if {
	e.alt != null
	glob.match(e.alt, ["/"], x)
}

_inspect(r, ix) if r.inspect

else if {
	some j in _candidates(ix.deny_hosts)
	d := ix.denies[j]
	d.request_level
	_ports_ok(d.ports)
	_deny_bins_hit(d.bins)
}

else := false

# --- denial explanation ------------------------------------------------------
# The conditions are narrowed in a fixed order (host, port, binary, hash,
# method, path, query, websocket); the first one no remaining rule satisfies is the
# reason, and the first rule that got furthest is named as the closest.

_denial(ix) := d if {
	s0 := [ix.rules[i] | some i in _candidates(ix.allow_hosts)]
	s1 := [r | some r in s0; input.request.port in r.ports]
	s2 := [r | some r in s1; _bins_path_ok(r.bins)]
	s3 := [r | some r in s2; _bins_ok(r.bins)]
	s4 := [r | some r in s3; _stage_ok("method", r)]
	s5 := [r | some r in s4; _stage_ok("path", r)]
	s6 := [r | some r in s5; _stage_ok("query", r)]
	stages := [
		["host_not_allowed", [], s0],
		["port_not_allowed", s0, s1],
		["binary_not_allowed", s1, s2],
		["hash_mismatch", s2, s3],
		["method_not_allowed", s3, s4],
		["path_not_allowed", s4, s5],
		["query_not_allowed", s5, s6],
		["websocket_not_allowed", s6, []],
	]
	k := _first([i | some i, s in stages; count(s[2]) == 0])
	d := {
		"allow": false,
		"inspect": false,
		"reason": stages[k][0],
		"rule": _closest(stages[k][1]),
		"inject": {},
	}
}

_stage_ok(_, _) if input.request.phase == "connect"

_stage_ok("method", r) if _methods_ok(r.methods)

_stage_ok("path", r) if _paths_ok(r.paths)

_stage_ok("query", r) if _query_ok(r.query)

_stage_ok("websocket", r) if _websocket_ok(r.websocket)

_closest(rs) := rs[0].name if count(rs) > 0

else := ""

_check_names := ["host", "port", "binary", "sha256", "method", "path", "query", "websocket"]

# A check whose value is undefined shows as null rather than silently
# dropping out of the explanation.
_checks(r, orig) := [{
	"check": c,
	"ok": _held(c, r, orig),
	"got": _shown(c),
	"allows": object.get(_allows(r, orig), c, null),
} |
	some c in _check_names
]

_held(c, r, orig) if _check(c, r, orig)

else := false

_shown(c) := v if v := _got(c)

else := null

_pins(orig) := ps if {
	ps := [b.sha256 | some b in object.get(orig, "binaries", []); b.sha256]
	count(ps) > 0
} else := "any"

# What the input has, per check.
_got("host") := input.request.host

_got("port") := input.request.port

_got("binary") := input.process.exe

_got("sha256") := input.process.sha256

_got("method") := input.request.method

_got("path") := input.request.path

_got("query") := input.request.query

_got("websocket") if input.request.upgrade == "websocket"

else := false

_allows(r, orig) := {
	"host": object.get(orig, "hosts", []),
	"port": sort(r.ports),
	"binary": [b.path | some b in object.get(orig, "binaries", [])],
	"sha256": _pins(orig),
	"method": object.get(orig, "methods", "full"),
	"path": object.get(orig, "paths", ["/**"]),
	"query": object.get(orig, "query", {}),
	"websocket": object.get(orig, "websocket", false),
}

_check("host", _, orig) if {
	some p in orig.hosts
	host_match(p, input.request.host)
}

_check("port", r, _) if input.request.port in r.ports

_check("binary", r, _) if _bins_path_ok(r.bins)

# A hash is pinned per binary path: with no path matching, the binary check
# is what fails, as the denial's narrowing says (hash_mismatch comes after);
# with a pinned entry matching the path, the pin is what decides (_bins_ok).
_check("sha256", r, _) if _bins_ok(r.bins)

_check("sha256", r, _) if not _bins_path_ok(r.bins)

_check(c, r, _) if {
	c in {"method", "path", "query", "websocket"}
	_stage_ok(c, r)
}

# --- matchers, exported for presets and tests --------------------------------

method_allowed(spec, m) if _methods_ok(_methods(spec)) with input.request.method as m

host_match("*", _) := true

host_match(p, h) if p == h

host_match(p, h) if {
	startswith(p, "*.")
	endswith(h, substring(p, 1, -1))
}

path_match(p, x) if _match(_path_entry(p, null), x)

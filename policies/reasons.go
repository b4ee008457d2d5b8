package policies

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Raiser says who may give a decision its reason: a preset's rules, the
// engine around them (before or instead of Rego), or the proxy around the
// policy. A reason some raise in common carries each of their bits.
type Raiser uint8

const (
	ByPreset Raiser = 1 << iota
	ByEngine
	ByProxy
)

// String names the raisers as the README's table does.
func (b Raiser) String() string {
	var names []string
	for _, r := range []struct {
		bit  Raiser
		name string
	}{{ByPreset, "preset"}, {ByEngine, "policy engine"}, {ByProxy, "proxy"}} {
		if b&r.bit != 0 {
			names = append(names, r.name)
		}
	}
	return strings.Join(names, ", ")
}

// ReasonSpec is all a reason code means, in one place: the HTTP status of
// its denial, who raises it, the hint an agent is shown, and when it is
// raised (the README's words). The proxy's answers, the policy CLI's hints
// and the README's table all come from Reasons, and a test fails when a
// Reason constant has no row or the README's table differs.
type ReasonSpec struct {
	Code Reason
	// Status is the denial's HTTP status; 0 for allowed, which is none.
	Status int
	By     Raiser
	// Hint is a template whose placeholders ({exe}, {target}, {host},
	// {port}, {method}, {path}, {rule}, {closest}, {preset}, {sha256},
	// {detail}) are filled from the decision, its input and the detail
	// of what failed (HintDetail).
	Hint string
	When string
}

// Reasons is the table of every reason code, in the README's order.
var Reasons = []ReasonSpec{
	{ReasonAllowed, 0, ByPreset,
		"{exe} may reach {target} by rule {rule}",
		"a rule allows it; the one reason that is not a denial"},
	{ReasonHostNotAllowed, http.StatusForbidden, ByPreset,
		"no rule of preset {preset} allows host {host}; add the host to a rule if this access is intended",
		"no rule names the host"},
	{ReasonPortNotAllowed, http.StatusForbidden, ByPreset,
		"port {port} is not allowed for {host}{closest}",
		"rules name the host, none this port"},
	{ReasonBinaryNotAllowed, http.StatusForbidden, ByPreset,
		"binary {exe} is not allowed to reach {target}{closest}; identity is the resolved executable, so a rule must name this exact path",
		"the rules for the endpoint name other executables (the resolved path of `/proc/<pid>/exe`)"},
	{ReasonHashMismatch, http.StatusForbidden, ByPreset,
		"binary {exe} has sha256 {sha256}, which does not match the sha256 pinned for its path{closest}; a pinned entry wins over unpinned ones that match the path too",
		"an entry of the rule with a sha256 matches the executable's path (it wins over entries without one) and the executable has none of its digests"},
	{ReasonMethodNotAllowed, http.StatusForbidden, ByPreset,
		"method {method} is not allowed on {host}{closest}",
		"the rule does not allow the method"},
	{ReasonPathNotAllowed, http.StatusForbidden, ByPreset,
		"path {path} is not allowed on {host}{closest}",
		"the rule does not allow the path"},
	{ReasonQueryNotAllowed, http.StatusForbidden, ByPreset,
		"the query of {method} {path} does not satisfy the rule{closest}: {detail}",
		"the rule's query conditions are not met (the detail names the parameter, never its value)"},
	{ReasonWebSocketNotAllowed, http.StatusForbidden, ByPreset,
		`a WebSocket to {target} is not allowed{closest}: after the upgrade frames go both ways unseen, so a rule must say "websocket": true`,
		"a WebSocket upgrade on a rule without `\"websocket\": true`"},
	{ReasonDeniedByRule, http.StatusForbidden, ByPreset,
		"deny rule {rule} matches {target}; deny rules win over allow rules",
		"a deny rule matches; deny rules win over allow rules"},
	{ReasonInvalidRequest, http.StatusForbidden, ByEngine | ByProxy,
		"the request cannot be read unambiguously: {detail}",
		"the request cannot be read one way only (an ambiguous path or query, a malformed target); 400 when its framing cannot be trusted, or the 431/501/417/505 the HTTP server answers itself"},
	{ReasonPolicyError, http.StatusForbidden, ByEngine,
		"the policy could not be evaluated, so the request is denied: {detail}",
		"evaluation failed: always a deny"},
	{ReasonPolicyQuarantined, http.StatusForbidden, ByEngine,
		"the policy bundle failed to reload and the engine is quarantined: everything is denied until it is fixed",
		"a reload failed under `--policy-quarantine`: everything is denied until the bundle is fixed"},
	{ReasonIdentityUnknown, http.StatusForbidden, ByProxy,
		"airlock could not attribute this connection to a process of the sandbox, so it is denied: {detail}",
		"the connection's process could not be found among the sandbox's (also a process in no service's cgroup of a pod, the detail naming its cgroup; or one running from a memory file not sealed against writes, whose bytes no digest can name)"},
	{ReasonIdentityAmbiguous, http.StatusForbidden, ByProxy,
		"the connection's socket is shared by processes that are not one identity (their executables, uids or services differ), so it is denied: {detail}",
		"processes running different executables, or as different uids, or in different services' cgroups, share the socket; or (with the connect hook) the process that connected it no longer holds it, or has executed another program since it connected (or was executing one when it did)"},
	{ReasonSSRF, http.StatusForbidden, ByProxy,
		"the destination is not a public address: {detail}; an operator can allow a range with --allow-range CIDR",
		"the host resolves to an address that is not public (loopback, private, link-local, ...)"},
	{ReasonHostMismatch, http.StatusMisdirectedRequest, ByProxy,
		"the request does not name the host its tunnel was opened to ({detail}); a tunnel carries only that host's traffic",
		"inside a tunnel, the Host header, the absolute URL or the TLS server name (a second ClientHello's after a HelloRetryRequest too) names another host than the CONNECT, or an opaque tunnel's ClientHello names none to a name"},
	{ReasonSecretUnavailable, http.StatusForbidden, ByProxy,
		"the policy injects a credential the proxy cannot send with this request ({detail}); the request was not sent without it",
		"an injected secret is missing, or the request is plain `http://`"},
	{ReasonWebSocketInjects, http.StatusForbidden, ByProxy,
		"a WebSocket to {target} is not allowed by rule {rule}: the rule injects a credential, which the WebSocket's frames could echo unscrubbed; use a rule without inject for WebSockets",
		"the policy allows a WebSocket upgrade on a rule that injects a credential, which frames could echo unscrubbed (a rule of the rules library cannot say both, a load error)"},
	{ReasonUpstreamError, http.StatusBadGateway, ByProxy,
		"the upstream could not be reached: {detail}",
		"the upstream could not be reached or answered badly; also a compressed answer to a request carrying an injected secret, which cannot be scrubbed"},
	{ReasonConnectionLimit, http.StatusServiceUnavailable, ByProxy,
		"the sandbox already holds {detail}; close idle connections and retry, or an operator can raise --max-conns",
		"the sandbox holds `--max-conns` connections already (with `Retry-After`)"},
	{ReasonAuditUnavailable, http.StatusServiceUnavailable, ByProxy,
		"the proxy sends nothing it cannot put on record, and its audit log cannot be written ({detail}); an operator must repair the audit log",
		"the decision could not be written to the audit log, so nothing was sent (see [Audit log](#audit-log))"},
	{ReasonDNSQueryRefused, http.StatusForbidden, ByProxy,
		"the sandbox's DNS answers only A and AAAA queries, with addresses the proxy maps back to their names; {detail} is refused, and no query is ever forwarded",
		"a DNS query in the sandbox other than A or AAAA (TXT, MX, SRV, HTTPS, ANY, PTR, another class): answered REFUSED, never forwarded (see [DNS in the sandbox](#dns-in-the-sandbox)); the status is never sent"},
	{ReasonDNSPoolExhausted, http.StatusServiceUnavailable, ByProxy,
		"the sandbox's DNS has no synthetic address free for {host} ({detail}); the names it answered recently hold them all, so retry later or look up fewer distinct names",
		"a DNS query for a new name while every synthetic address is a remembered name's or was one too recently to be given to another: answered SERVFAIL (see [DNS in the sandbox](#dns-in-the-sandbox)); the status is never sent"},
	{ReasonNameForgotten, http.StatusMisdirectedRequest, ByProxy,
		"{host} is an address the sandbox's DNS answered for a name it no longer remembers ({detail}); look the name up again and reconnect",
		"a transparent connection went to a synthetic address whose name the sandbox's DNS has since forgotten (its TTL passed, or newer names took its place)"},
}

var reasonSpecs = func() map[Reason]*ReasonSpec {
	m := make(map[Reason]*ReasonSpec, len(Reasons))
	for i := range Reasons {
		m[Reasons[i].Code] = &Reasons[i]
	}
	return m
}()

// Spec is r's row of Reasons; a code without one reads as policy_error's,
// as the engine treats a code it does not know.
func (r Reason) Spec() ReasonSpec {
	if s, ok := reasonSpecs[r]; ok {
		return *s
	}
	return *reasonSpecs[ReasonPolicyError]
}

// Status is the HTTP status of a denial for r.
func (r Reason) Status() int { return r.Spec().Status }

// Hint is a one-line explanation of a decision that a person or an agent
// can act on: what failed, for which binary and endpoint, and what to
// change. The detail is the decision's own (Why).
func (d Decision) Hint(in *Input) string { return d.HintDetail(in, d.Why()) }

// HintDetail is Hint with the detail of what failed given: the proxy's,
// for a denial it made around the policy.
func (d Decision) HintDetail(in *Input, detail string) string {
	r := &in.Request
	target := fmt.Sprintf("%s:%d", r.Host, r.Port)
	if r.Phase == PhaseRequest {
		target = fmt.Sprintf("%s %s:%d%s", r.Method, r.Host, r.Port, r.Path)
	}
	op, service := GitOperation(r)
	if service != "" && strings.HasSuffix(r.Path, "/info/refs") {
		// The service is the whole difference between a clone's first
		// request and a push's. A fixed token, never a query value a
		// client chose.
		target += "?service=" + service
	}
	closest := ""
	if d.Rule != "" {
		closest = fmt.Sprintf(" (closest rule %q)", d.Rule)
	}
	hint := strings.NewReplacer(
		"{exe}", in.Process.Exe,
		"{target}", target,
		"{host}", r.Host,
		"{port}", strconv.Itoa(r.Port),
		"{method}", r.Method,
		"{path}", r.Path,
		"{rule}", strconv.Quote(d.Rule),
		"{closest}", closest,
		"{preset}", strconv.Quote(d.Preset),
		"{sha256}", short(in.Process.SHA256),
		"{detail}", detail,
	).Replace(d.Reason.Spec().Hint)
	switch {
	case op == "" || d.Reason == ReasonAllowed:
	case d.Reason.Spec().By&ByPreset != 0:
		hint = fmt.Sprintf("%s %s is not allowed by preset %q: %s", op, r.Host, d.Preset, hint)
	default: // not the policy's answer: the push may be allowed, and failed
		hint = fmt.Sprintf("%s %s: %s", op, r.Host, hint)
	}
	return hint
}

// GitOperation reads a request as git smart HTTP: op is "push to" for
// git-receive-pack and "clone or fetch from" for git-upload-pack, whether
// the request is the ref discovery (GET …/info/refs?service=…) or the pack
// itself (POST …/git-*-pack); both are empty for any other request.
func GitOperation(r *Request) (op, service string) {
	if r.Phase != PhaseRequest {
		return "", ""
	}
	switch {
	case strings.HasSuffix(r.Path, "/git-receive-pack"):
		service = "git-receive-pack"
	case strings.HasSuffix(r.Path, "/git-upload-pack"):
		service = "git-upload-pack"
	case strings.HasSuffix(r.Path, "/info/refs"):
		for k, vs := range r.Query {
			if ParamKey(k) != "service" {
				continue
			}
			for _, v := range vs {
				// A push among the values makes it a push, as a deny
				// rule on the service reads it.
				if s := fold(strings.TrimSpace(v)); s == "git-receive-pack" || (s == "git-upload-pack" && service == "") {
					service = s
				}
			}
		}
	}
	switch service {
	case "git-receive-pack":
		return "push to", service
	case "git-upload-pack":
		return "clone or fetch from", service
	}
	return "", ""
}

// ParamKey is the library's _param_key (lib/airlock.rego): a query
// param's name as the servers the rules guard read it, which rules on a
// param match by. The hint must name the operation the deny rule saw
// (?service[0]=git-receive-pack is a push to it), and the proxy finds a
// method override (_method) as a server would. TestParamKeyMirrorsLibrary
// holds the two together.
func ParamKey(n string) string {
	n = fold(n) // first, as the library folds: ［ is [ and ． is . after it
	base := n
	if i := strings.IndexByte(n, '['); i > 0 && strings.IndexByte(n[i:], ']') > 0 {
		base = n[:i]
	} else if j := strings.IndexByte(n, ']'); i == 0 && j > 0 {
		base = n[1:j]
	}
	return phpUnderscores.Replace(strings.TrimLeft(base, " "))
}

// phpUnderscores are the characters PHP names a param's "_" by.
var phpUnderscores = strings.NewReplacer(".", "_", " ", "_", "[", "_")

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	if s == "" {
		return "(none)"
	}
	return s
}

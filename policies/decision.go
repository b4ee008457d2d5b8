package policies

import (
	"cmp"
	"strings"
)

// Reason is a stable code saying why a decision came out as it did. The
// proxy's 403 body, its audit line and its metrics all carry the same code.
type Reason string

const (
	ReasonAllowed             Reason = "allowed"
	ReasonBinaryNotAllowed    Reason = "binary_not_allowed"
	ReasonHashMismatch        Reason = "hash_mismatch"
	ReasonHostNotAllowed      Reason = "host_not_allowed"
	ReasonPortNotAllowed      Reason = "port_not_allowed"
	ReasonMethodNotAllowed    Reason = "method_not_allowed"
	ReasonPathNotAllowed      Reason = "path_not_allowed"
	ReasonQueryNotAllowed     Reason = "query_not_allowed"
	ReasonWebSocketNotAllowed Reason = "websocket_not_allowed"
	ReasonDeniedByRule        Reason = "denied_by_rule"
	ReasonInvalidRequest      Reason = "invalid_request"
	ReasonPolicyError         Reason = "policy_error"
	ReasonPolicyQuarantined   Reason = "policy_quarantined"

	// Decided by the proxy around the policy: who is asking, where the
	// name leads, whether the request matches its tunnel, whether a
	// secret the policy asks to inject exists and can be kept from the
	// agent (never on a WebSocket, whose frames are not scrubbed); whether the sandbox
	// already holds as many connections as it may; whether the
	// decision could be put on record before anything was dialled for it;
	// and whether a transparent connection's synthetic address still
	// names a host.
	ReasonIdentityUnknown   Reason = "identity_unknown"
	ReasonIdentityAmbiguous Reason = "identity_ambiguous"
	ReasonSSRF              Reason = "ssrf_blocked"
	ReasonHostMismatch      Reason = "host_mismatch"
	ReasonSecretUnavailable Reason = "secret_unavailable"
	ReasonWebSocketInjects  Reason = "websocket_injects_credential"
	ReasonUpstreamError     Reason = "upstream_error"
	ReasonConnectionLimit   Reason = "connection_limit"
	ReasonAuditUnavailable  Reason = "audit_unavailable"
	// The sandbox's DNS answerer refuses what it never answers: a query
	// other than A or AAAA (class IN). Nothing is forwarded.
	ReasonDNSQueryRefused Reason = "dns_query_refused"
	ReasonNameForgotten   Reason = "name_forgotten"
	// The sandbox's pool of synthetic addresses has none free: every one
	// is a remembered name's, or was one too recently to be another's.
	ReasonDNSPoolExhausted Reason = "dns_pool_exhausted"
)

// policyReasons are the codes a preset's decision may carry (ByPreset in
// Reasons); anything else coming out of Rego is treated as a policy error.
var policyReasons = func() map[Reason]bool {
	m := map[Reason]bool{}
	for _, s := range Reasons {
		if s.By&ByPreset != 0 {
			m[s.Code] = true
		}
	}
	return m
}()

// Decision is the answer to one question. Its zero value denies.
type Decision struct {
	Allow bool `json:"allow"`
	// Inspect asks the proxy to terminate TLS so each request inside the
	// tunnel is decided; false with Allow means an opaque tunnel.
	Inspect bool   `json:"inspect"`
	Reason  Reason `json:"reason"`
	// Rule is the rule that matched (allow, denied_by_rule) or, for other
	// denials, the closest rule: the first that passed the most checks.
	Rule string `json:"rule,omitempty"`
	// Inject lists headers the proxy adds upstream, by secret reference.
	Inject map[string]SecretRef `json:"inject,omitempty"`
	// Preset and Policy (the bundle hash) say which policy decided.
	Preset string `json:"preset"`
	Policy string `json:"policy"`
	// Error carries the evaluation or input error behind policy_error and
	// invalid_request, and nothing else: the proxy reads a decision with
	// one as no answer of the policy's to the request as asked (a method
	// override's is then audited and answered as the request was sent).
	Error string `json:"error,omitempty"`
	// Detail says more of a denial the policy made: for
	// query_not_allowed, the query parameter that failed (by name: a
	// query's values are never written down).
	Detail string `json:"detail,omitempty"`
}

// Why is the detail of d a hint and an audit line give: its error, or
// the denial's detail.
func (d Decision) Why() string { return cmp.Or(d.Error, d.Detail) }

// SecretRef names where the proxy finds a secret; the policy never holds it.
type SecretRef struct {
	Env    string `json:"env,omitempty"`
	File   string `json:"file,omitempty"`
	Format string `json:"format,omitempty"`
}

// deny builds a denial the engine itself decided, before or instead of Rego.
func deny(reason Reason, preset, policy string, err error) Decision {
	d := Decision{Reason: reason, Preset: preset, Policy: policy}
	if err != nil {
		d.Error = strings.TrimSpace(err.Error())
	}
	return d
}

package policies

import (
	"fmt"
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
	// name leads, whether the request matches its tunnel, and whether a
	// secret the policy asks to inject exists; whether the sandbox
	// already holds as many connections as it may; and whether the
	// decision could be put on record before anything was dialled for it.
	ReasonIdentityUnknown   Reason = "identity_unknown"
	ReasonIdentityAmbiguous Reason = "identity_ambiguous"
	ReasonSSRF              Reason = "ssrf_blocked"
	ReasonHostMismatch      Reason = "host_mismatch"
	ReasonSecretUnavailable Reason = "secret_unavailable"
	ReasonUpstreamError     Reason = "upstream_error"
	ReasonConnectionLimit   Reason = "connection_limit"
	ReasonAuditUnavailable  Reason = "audit_unavailable"
)

// policyReasons are the codes a preset's decision may carry; anything else
// coming out of Rego is treated as a policy error.
var policyReasons = map[Reason]bool{
	ReasonAllowed: true, ReasonBinaryNotAllowed: true, ReasonHashMismatch: true,
	ReasonHostNotAllowed: true, ReasonPortNotAllowed: true, ReasonMethodNotAllowed: true,
	ReasonPathNotAllowed: true, ReasonQueryNotAllowed: true, ReasonWebSocketNotAllowed: true, ReasonDeniedByRule: true,
}

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
	// invalid_request.
	Error string `json:"error,omitempty"`
}

// SecretRef names where the proxy finds a secret; the policy never holds it.
type SecretRef struct {
	Env    string `json:"env,omitempty"`
	File   string `json:"file,omitempty"`
	Format string `json:"format,omitempty"`
}

// Hint is a one-line explanation of a denial that a person or an agent can
// act on: what failed, for which binary and endpoint, and what to change.
func (d Decision) Hint(in *Input) string {
	r := &in.Request
	target := fmt.Sprintf("%s:%d", r.Host, r.Port)
	if r.Phase == PhaseRequest {
		target = fmt.Sprintf("%s %s:%d%s", r.Method, r.Host, r.Port, r.Path)
	}
	exe := in.Process.Exe
	closest := ""
	if d.Rule != "" {
		closest = fmt.Sprintf(" (closest rule %q)", d.Rule)
	}
	switch d.Reason {
	case ReasonAllowed:
		return fmt.Sprintf("%s may reach %s by rule %q", exe, target, d.Rule)
	case ReasonHostNotAllowed:
		return fmt.Sprintf("no rule of preset %q allows host %s; add the host to a rule if this access is intended", d.Preset, r.Host)
	case ReasonPortNotAllowed:
		return fmt.Sprintf("port %d is not allowed for %s%s", r.Port, r.Host, closest)
	case ReasonBinaryNotAllowed:
		return fmt.Sprintf("binary %s is not allowed to reach %s%s; identity is the resolved executable, so a rule must name this exact path", exe, target, closest)
	case ReasonHashMismatch:
		return fmt.Sprintf("binary %s has sha256 %s, which is not pinned by the rule%s", exe, short(in.Process.SHA256), closest)
	case ReasonMethodNotAllowed:
		return fmt.Sprintf("method %s is not allowed on %s%s", r.Method, r.Host, closest)
	case ReasonPathNotAllowed:
		return fmt.Sprintf("path %s is not allowed on %s%s", r.Path, r.Host, closest)
	case ReasonQueryNotAllowed:
		return fmt.Sprintf("query parameters of %s %s do not satisfy the rule%s", r.Method, r.Path, closest)
	case ReasonWebSocketNotAllowed:
		return fmt.Sprintf("a WebSocket to %s is not allowed%s: after the upgrade frames go both ways unseen, so a rule must say \"websocket\": true", target, closest)
	case ReasonDeniedByRule:
		return fmt.Sprintf("deny rule %q matches %s; deny rules win over allow rules", d.Rule, target)
	case ReasonInvalidRequest:
		return "the request cannot be read unambiguously: " + d.Error
	case ReasonPolicyQuarantined:
		return "the policy bundle failed to reload and the engine is quarantined: everything is denied until it is fixed"
	default:
		return "the policy could not be evaluated, so the request is denied: " + d.Error
	}
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	if s == "" {
		return "(none)"
	}
	return s
}

// deny builds a denial the engine itself decided, before or instead of Rego.
func deny(reason Reason, preset, policy string, err error) Decision {
	d := Decision{Reason: reason, Preset: preset, Policy: policy}
	if err != nil {
		d.Error = strings.TrimSpace(err.Error())
	}
	return d
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock/policies"
)

// printExplanation renders what the engine's explanation holds: the checks,
// their order and what each rule allows all come from the policy library
// that decided, so nothing here can disagree with the decision.
func printExplanation(w io.Writer, x policies.Explanation) {
	d, r := x.Decision, x.Input.Request
	verdict := "DENY"
	if d.Allow {
		verdict = "ALLOW"
		if r.Phase == policies.PhaseConnect {
			verdict += map[bool]string{true: " (inspect: TLS terminated)", false: " (tunnel)"}[d.Inspect]
		}
	}
	fmt.Fprintf(w, "%s  reason=%s rule=%q preset=%s\n", verdict, d.Reason, d.Rule, d.Preset)
	fmt.Fprintf(w, "  %s\n", d.Hint(x.Input))
	fmt.Fprintf(w, "  binary %s (sha256 %s)\n  %s %s:%d", show(x.Input.Process.Exe), show(x.Input.Process.SHA256), r.Phase, r.Host, r.Port)
	if r.Phase == policies.PhaseRequest {
		fmt.Fprintf(w, " %s %s", r.Method, r.Path)
	}
	fmt.Fprintln(w)
	if !x.Evaluated {
		fmt.Fprintf(w, "  no rule was checked: the engine answered %s before the preset's rules\n", d.Reason)
		return
	}
	for _, name := range x.Denies {
		fmt.Fprintf(w, "  deny rule %q matches (deny rules win)\n", name)
	}
	if len(x.Rules) == 0 {
		fmt.Fprintln(w, "  the preset has no allow rules: everything is denied")
		return
	}
	fmt.Fprintln(w, "  rule-by-rule (✓ held, ✗ failed):")
	for _, re := range x.Rules {
		var cells []string
		for _, c := range re.Checks {
			mark := "✗"
			if c.OK {
				mark = "✓"
			}
			cells = append(cells, c.Check+" "+mark)
		}
		closest := ""
		if re.Rule == x.Closest {
			closest = "   ← closest"
		}
		fmt.Fprintf(w, "    %-28s %s%s\n", re.Rule, strings.Join(cells, "  "), closest)
	}
	for _, re := range x.Rules {
		if re.Rule != x.Closest {
			continue
		}
		var need []string
		for _, c := range re.Failed() {
			need = append(need, fmt.Sprintf("%s %s (it allows %s)", c.Check, show(c.Got), show(c.Allows)))
		}
		fmt.Fprintf(w, "  to allow this, rule %q would need: %s\n", re.Rule, strings.Join(need, "; "))
	}
}

// show renders a value of the explanation: a string as it is, a list
// comma-separated, anything else as JSON.
func show(v any) string {
	switch v := v.(type) {
	case string:
		if v == "" {
			return "(none)"
		}
		return v
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = show(e)
		}
		return strings.Join(parts, ", ")
	default:
		raw, _ := json.Marshal(v)
		return string(raw)
	}
}

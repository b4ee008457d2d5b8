package policies

import (
	"context"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/rego"
)

// RuleCheck is one condition of a rule as the library's explain evaluated it:
// whether it held, what the input has and what the rule allows. The checks,
// their order and their values come from the Rego library (lib.explain),
// the same code that decides, so an explanation cannot drift from a
// decision.
type RuleCheck struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Got    any    `json:"got"`
	Allows any    `json:"allows"`
}

// RuleExplanation says which conditions of one rule held for an input.
type RuleExplanation struct {
	Rule   string      `json:"rule"`
	Checks []RuleCheck `json:"checks"`
}

// Failed lists the checks that did not hold, in order.
func (r RuleExplanation) Failed() []RuleCheck {
	var out []RuleCheck
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Explanation is the answer to "why": the decision, every rule's checks, the
// deny rules that matched, and the closest allow rule.
type Explanation struct {
	Decision Decision `json:"decision"`
	Input    *Input   `json:"input"`
	// Evaluated is false when the engine answered before the preset's rules
	// were asked (invalid_request, an unknown preset, quarantine): then
	// Rules is empty because no rule was checked, not because there are none.
	Evaluated bool              `json:"evaluated"`
	Rules     []RuleExplanation `json:"rules"`
	Denies    []string          `json:"denies"`
	// Closest is the decision's closest rule (Decision.Rule of a denial
	// other than denied_by_rule): the rule to edit if this access should
	// be allowed.
	Closest string `json:"closest,omitempty"`
}

// Explain decides in and reports, rule by rule, which conditions held.
func (e *Engine) Explain(ctx context.Context, in *Input) (Explanation, error) {
	g := e.gen.Load()
	x := Explanation{Decision: e.Decide(ctx, in), Input: in}
	p, ok := g.presets[in.Sandbox.Preset]
	if !ok || x.Decision.Reason == ReasonInvalidRequest || g.quarantine != nil {
		return x, nil
	}
	if !x.Decision.Allow && x.Decision.Reason != ReasonDeniedByRule {
		x.Closest = x.Decision.Rule
	}
	rs, err := p.explain.Eval(ctx, rego.EvalParsedInput(in.value()))
	if err != nil {
		return x, fmt.Errorf("explain: %w", err)
	}
	if len(rs) != 1 {
		return x, errors.New("explain: undefined")
	}
	if x.Rules, x.Denies, err = parseExplanation(rs[0].Bindings["x"]); err != nil {
		return x, fmt.Errorf("explain: %w", err)
	}
	x.Evaluated = true
	return x, nil
}

// parseExplanation reads lib.explain's result strictly: a malformed one is
// an error, never an explanation with checks missing.
func parseExplanation(v any) ([]RuleExplanation, []string, error) {
	obj, _ := v.(map[string]any)
	rules, ok1 := obj["rules"].([]any)
	denies, ok2 := obj["denies"].([]any)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("result %v lacks rules or denies", v)
	}
	var out []RuleExplanation
	for _, r := range rules {
		m, _ := r.(map[string]any)
		name, ok1 := m["rule"].(string)
		checks, ok2 := m["checks"].([]any)
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("rule %v lacks a name or checks", r)
		}
		re := RuleExplanation{Rule: name}
		for _, c := range checks {
			cm, _ := c.(map[string]any)
			check, ok1 := cm["check"].(string)
			held, ok2 := cm["ok"].(bool)
			if !ok1 || !ok2 {
				return nil, nil, fmt.Errorf("rule %q: check %v lacks a name or ok", name, c)
			}
			re.Checks = append(re.Checks, RuleCheck{Check: check, OK: held, Got: cm["got"], Allows: cm["allows"]})
		}
		out = append(out, re)
	}
	var names []string
	for _, d := range denies {
		s, ok := d.(string)
		if !ok {
			return nil, nil, fmt.Errorf("deny %v is not a name", d)
		}
		names = append(names, s)
	}
	return out, names, nil
}

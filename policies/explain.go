package policies

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/rego"
)

// Checks are the conditions of a rule, in the order they are narrowed.
var Checks = []string{"host", "port", "binary", "sha256", "method", "path", "query"}

// RuleExplanation says which conditions of one rule held for an input.
type RuleExplanation struct {
	Rule   string          `json:"rule"`
	Checks map[string]bool `json:"checks"`
}

// Failed lists the checks that did not hold, in order.
func (r RuleExplanation) Failed() []string {
	var out []string
	for _, c := range Checks {
		if !r.Checks[c] {
			out = append(out, c)
		}
	}
	return out
}

// Explanation is the answer to "why": the decision, every rule's checks, the
// deny rules that matched, and the closest allow rule.
type Explanation struct {
	Decision Decision          `json:"decision"`
	Input    *Input            `json:"input"`
	Rules    []RuleExplanation `json:"rules"`
	Denies   []string          `json:"denies"`
	// Closest is the rule that passed the most checks (first wins a tie):
	// the rule to edit if this access should be allowed.
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
	rs, err := p.explain.Eval(ctx, rego.EvalParsedInput(in.value()))
	if err != nil {
		return x, fmt.Errorf("explain: %w", err)
	}
	if len(rs) != 1 {
		return x, fmt.Errorf("explain: undefined")
	}
	obj, _ := rs[0].Bindings["x"].(map[string]any)
	rules, _ := obj["rules"].([]any)
	best := -1
	for _, r := range rules {
		m, _ := r.(map[string]any)
		name, _ := m["rule"].(string)
		checks, _ := m["checks"].(map[string]any)
		re := RuleExplanation{Rule: name, Checks: map[string]bool{}}
		passed := 0
		for _, c := range Checks {
			ok, _ := checks[c].(bool)
			re.Checks[c] = ok
			if ok {
				passed++
			}
		}
		if passed > best {
			best, x.Closest = passed, name
		}
		x.Rules = append(x.Rules, re)
	}
	denies, _ := obj["denies"].([]any)
	for _, d := range denies {
		if s, ok := d.(string); ok {
			x.Denies = append(x.Denies, s)
		}
	}
	return x, nil
}

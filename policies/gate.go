package policies

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// The action gate's policy: package airlock.gate of the bundle, reviewed
// and pinned with the presets, decides each external action an agent
// proposes (send this mail, open that pull request). Unlike a preset it
// reads its input, and it is asked once per action, not per request: it is
// neither indexed nor cached, and nothing on the proxy's path calls it.

// gatePackage is the gate policy's package; its rule `decision` decides.
const gatePackage = "data.airlock.gate"

// GateInput is one proposed action.
type GateInput struct {
	Action string `json:"action"`
	Target string `json:"target"`
	// Today counts the auto actions already taken today (UTC), by action:
	// what the policy's daily caps are checked against.
	Today map[string]int `json:"today"`
}

// Outcome is what the gate decided for an action.
type Outcome string

// The outcomes a gate policy may decide. (The orchestrator's kill file adds
// "killed", decided before any policy is asked.)
const (
	OutcomeAuto   Outcome = "auto"   // ship it
	OutcomeDraft  Outcome = "draft"  // park it for a human to send
	OutcomeBlock  Outcome = "block"  // refuse it
	OutcomeBudget Outcome = "budget" // auto, but today's cap is spent: defer
)

var gateOutcomes = map[Outcome]bool{OutcomeAuto: true, OutcomeDraft: true, OutcomeBlock: true, OutcomeBudget: true}

// GateDecision is the gate policy's answer, with the hash of the bundle
// that gave it.
type GateDecision struct {
	Outcome Outcome
	Rule    string
	Reason  string
	Policy  string
}

// ErrNoGate: the bundle has no gate policy, so no action can be decided.
var ErrNoGate = errors.New("policy bundle has no gate policy (package airlock.gate with a decision rule)")

// Gate asks the bundle's gate policy about one action. Every failure (no
// gate policy, a quarantined bundle, an evaluation error, a decision that
// is not exactly {outcome, rule, reason} with one of the four outcomes and
// a rule name) is an error: the caller must treat it as a block.
func (e *Engine) Gate(ctx context.Context, in GateInput) (GateDecision, error) {
	g := e.gen.Load()
	if g.quarantine != nil {
		return GateDecision{}, fmt.Errorf("policy %s is quarantined: %w", g.hash, g.quarantine)
	}
	if g.gate == nil {
		return GateDecision{}, fmt.Errorf("policy %s (%s): %w", g.hash, g.origin, ErrNoGate)
	}
	if in.Today == nil {
		in.Today = map[string]int{} // the policy reads counts, never a null
	}
	input, err := ast.InterfaceToValue(in)
	if err != nil {
		return GateDecision{}, fmt.Errorf("gate input: %w", err)
	}
	rs, err := g.gate.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return GateDecision{}, fmt.Errorf("gate policy %s: %w", g.hash, err)
	}
	d, err := parseGateDecision(rs)
	if err != nil {
		return GateDecision{}, fmt.Errorf("gate policy %s: action %q: %w", g.hash, in.Action, err)
	}
	d.Policy = g.hash
	return d, nil
}

// parseGateDecision reads the decision strictly: a missing, mistyped or
// unknown field, or an outcome outside the four, is an error, never a
// default.
func parseGateDecision(rs rego.ResultSet) (GateDecision, error) {
	if len(rs) != 1 {
		return GateDecision{}, errors.New("decision is undefined")
	}
	obj, ok := rs[0].Bindings["x"].(map[string]any)
	if !ok {
		return GateDecision{}, fmt.Errorf("decision is %T, not an object", rs[0].Bindings["x"])
	}
	var extra []string
	for k := range obj {
		if k != "outcome" && k != "rule" && k != "reason" {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return GateDecision{}, fmt.Errorf("decision %v has unknown field(s) %v (want outcome, rule, reason)", obj, extra)
	}
	outcome, _ := obj["outcome"].(string)
	rule, _ := obj["rule"].(string)
	reason, _ := obj["reason"].(string)
	switch {
	case !gateOutcomes[Outcome(outcome)]:
		return GateDecision{}, fmt.Errorf("decision %v: outcome %v is not one of auto, draft, block, budget", obj, obj["outcome"])
	case rule == "":
		return GateDecision{}, fmt.Errorf("decision %v names no rule", obj)
	case reason == "":
		return GateDecision{}, fmt.Errorf("decision %v gives no reason", obj)
	}
	return GateDecision{Outcome: Outcome(outcome), Rule: rule, Reason: reason}, nil
}

// prepareGate prepares the gate policy's query when the bundle has one;
// nil when it has none.
func prepareGate(ctx context.Context, c *ast.Compiler, mods map[string]*ast.Module) (*rego.PreparedEvalQuery, error) {
	found := false
	for _, m := range mods {
		found = found || m.Package.Path.String() == gatePackage
	}
	if !found {
		return nil, nil
	}
	q, err := prepare(ctx, c, rego.Query("x := "+gatePackage+".decision"))
	if err != nil {
		return nil, fmt.Errorf("gate policy: %w", err)
	}
	return &q, nil
}

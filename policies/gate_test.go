package policies_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The shipped gate policy, through the engine: each outcome it can decide.
func TestGateShippedPolicy(t *testing.T) {
	e := embedded(t)
	for _, tc := range []struct {
		action, target string
		today          map[string]int
		want           policies.Outcome
		rule           string
	}{
		{"open_pr", "o/r", nil, policies.OutcomeAuto, "auto"},
		{"open_pr", "o/r", map[string]int{"open_pr": 5}, policies.OutcomeBudget, "daily-cap"},
		{"send_mail", "x@example.test", nil, policies.OutcomeDraft, "mail-outside"},
		{"force_push", "o/r", nil, policies.OutcomeBlock, "destructive"},
		{"launch_rocket", "moon", nil, policies.OutcomeBlock, "unlisted"},
	} {
		d, err := e.Gate(context.Background(), policies.GateInput{Action: tc.action, Target: tc.target, Today: tc.today})
		if err != nil {
			t.Fatalf("Gate(%s %s): %v", tc.action, tc.target, err)
		}
		if d.Outcome != tc.want || d.Rule != tc.rule || d.Reason == "" || d.Policy != e.Hash() {
			t.Errorf("Gate(%s %s %v) = %+v, want %s by rule %s with a reason and policy %s", tc.action, tc.target, tc.today, d, tc.want, tc.rule, e.Hash())
		}
	}
}

// A gate policy whose answer is not exactly a valid decision, or that
// cannot answer, is an error naming what is wrong, never an outcome.
func TestGateRefusesMalformedDecisions(t *testing.T) {
	const head = "package airlock.gate\n\n"
	for _, tc := range []struct{ name, body, want string }{
		{"outcome outside the four", head + `decision := {"outcome": "maybe", "rule": "r", "reason": "x"}`, "not one of auto, draft, block, budget"},
		{"killed is not the policy's", head + `decision := {"outcome": "killed", "rule": "r", "reason": "x"}`, "not one of auto, draft, block, budget"},
		{"no rule name", head + `decision := {"outcome": "auto", "rule": "", "reason": "x"}`, "names no rule"},
		{"rule missing", head + `decision := {"outcome": "auto", "reason": "x"}`, "names no rule"},
		{"no reason", head + `decision := {"outcome": "auto", "rule": "r"}`, "gives no reason"},
		{"unknown field", head + `decision := {"outcome": "auto", "rule": "r", "reason": "x", "cap": 3}`, `unknown field(s) [cap]`},
		{"not an object", head + `decision := "auto"`, "not an object"},
		{"undefined", head + `decision := {"outcome": "auto", "rule": "r", "reason": "x"} if input.action == "never"`, "undefined"},
		{"evaluation error", head + "decision := {\"outcome\": \"auto\", \"rule\": \"r\", \"reason\": \"x\"} if input.action\n\ndecision := {\"outcome\": \"block\", \"rule\": \"r\", \"reason\": \"x\"} if input.target\n", "conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			writeBundle(t, dir, map[string]string{"gate.rego": tc.body, "gate_test.rego": ""})
			e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.Gate(context.Background(), policies.GateInput{Action: "open_pr", Target: "o/r"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Gate = %+v, %v; want an error containing %q", d, err, tc.want)
			}
		})
	}
}

// A bundle without a gate policy serves its presets, and refuses to decide
// any action.
func TestGateWithoutGatePolicy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, map[string]string{"gate.rego": "", "gate_test.rego": ""})
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Gate(context.Background(), policies.GateInput{Action: "open_pr", Target: "o/r"})
	if !errors.Is(err, policies.ErrNoGate) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Gate = %v; want ErrNoGate naming the bundle %s", err, dir)
	}
}

// Package gate is the action gate: the autonomy boundary every external
// action an agent proposes (send a mail, open a pull request, push a
// branch) passes through. It decides auto, draft, block, budget or killed
// from the policy bundle's gate policy (package airlock.gate, reviewed and
// pinned with the presets) and the operator's kill file, and leaves a
// trace of every decision: a line in the home's auto-action-log.jsonl, and
// for a draft or a block a line in today's memory file for a human.
package gate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/policies"
)

// Killed is the kill file's outcome: while Home.KillFile exists every
// action is halted, whatever the policy would decide.
const Killed policies.Outcome = "killed"

// Rules the gate names itself, when no policy rule decided.
const (
	RuleKillFile      = "kill-file"      // the kill file is present
	RulePolicyError   = "policy-error"   // the gate policy failed, or could not be asked: blocked
	RuleInvalidAction = "invalid-action" // not a name: refused before anything is decided
	RuleUnrecorded    = "unrecorded"     // the action log could not be written: blocked
)

// Decision is one decided action: a line of auto-action-log.jsonl.
type Decision struct {
	TS      time.Time        `json:"ts"`
	Action  string           `json:"action"`
	Target  string           `json:"target"`
	Outcome policies.Outcome `json:"outcome"`
	Rule    string           `json:"rule"`
	Reason  string           `json:"reason"`
	Policy  string           `json:"policy"` // the bundle hash
}

// ErrInvalidAction: the action is not a name the log and the policy can
// key on.
var ErrInvalidAction = errors.New("invalid action")

// actionName is what an action may be called: a policy table's key, a
// word of the parked line.
var actionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// Decide decides one proposed action, in order:
//  1. the kill file present → killed (a file that cannot be checked counts
//     as present), with a gate_killed event in the home's inbox; the
//     policy is not asked;
//  2. else the gate policy, given today's auto actions by action, counted
//     from the action log; a policy that fails decides block, naming why;
//  3. the decision appended to the action log, fsync'd: counting, deciding
//     and appending hold the log's flock, so concurrent gates never take an
//     action past its daily cap;
//  4. a draft or a block parked in today's memory file.
//
// An error means the decision could not be recorded (log, memory file or
// inbox): the caller must not take the action. A decision that reached no
// log is a block.
func Decide(ctx context.Context, home orchestrator.Home, e *policies.Engine, action, target string, clock func() time.Time) (Decision, error) {
	d := Decision{TS: clock().UTC(), Action: action, Target: target, Policy: e.Hash()}
	if !actionName.MatchString(action) {
		return block(d, RuleInvalidAction, "the action is not a name"), fmt.Errorf("%w %q: want a name of letters, digits and _.:- (send_mail)", ErrInvalidAction, action)
	}
	log, err := lockLog(home.ActionLog())
	if err != nil {
		return block(d, RuleUnrecorded, err.Error()), err
	}
	defer log.close()
	// Stamped once the log is the gate's: one that waited on the lock (or
	// was stopped) must not append a line older than those before it,
	// which countAuto reads back only as far as the day's start.
	d.TS = clock().UTC()

	if why, killed := killFile(home.KillFile()); killed {
		d.Outcome, d.Rule, d.Reason = Killed, RuleKillFile, why
	} else {
		decide(ctx, e, log, &d)
	}
	if err := log.append(d); err != nil {
		return block(d, RuleUnrecorded, err.Error()), err
	}
	log.close() // the decision is recorded: release the next gate

	switch d.Outcome {
	case Killed:
		// The inbox is told that an action was halted.
		return d, home.Notify("gate_killed", fmt.Sprintf("action %s on %q halted: %s", d.Action, d.Target, d.Reason))
	case policies.OutcomeDraft, policies.OutcomeBlock:
		return d, park(home.Memory(orchestrator.Today(d.TS)), d)
	}
	return d, nil
}

// decide asks the policy, with today's counts from the locked log.
func decide(ctx context.Context, e *policies.Engine, log *actionLog, d *Decision) {
	today, err := log.autoCounts(orchestrator.Today(d.TS))
	if err != nil {
		d.Outcome, d.Rule, d.Reason = policies.OutcomeBlock, RulePolicyError, fmt.Sprintf("today's auto actions unknown: %v", err)
		return
	}
	pd, err := e.Gate(ctx, policies.GateInput{Action: d.Action, Target: d.Target, Today: today})
	if err != nil {
		d.Outcome, d.Rule, d.Reason = policies.OutcomeBlock, RulePolicyError, err.Error()
		return
	}
	d.Outcome, d.Rule, d.Reason, d.Policy = pd.Outcome, pd.Rule, pd.Reason, pd.Policy
}

// block turns d into a block that says why it was not recorded.
func block(d Decision, rule, why string) Decision {
	d.Outcome, d.Rule, d.Reason = policies.OutcomeBlock, rule, why
	return d
}

// killFile reports whether the kill file halts actions, and why. Only
// "does not exist" lets them through: a file that cannot be checked
// (permissions, I/O) is taken as present.
func killFile(path string) (string, bool) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return fmt.Sprintf("kill file %s is present: every action is halted until it is removed", path), true
	case errors.Is(err, os.ErrNotExist):
		return "", false
	}
	return fmt.Sprintf("kill file %s cannot be checked, so it counts as present: %v", path, err), true
}

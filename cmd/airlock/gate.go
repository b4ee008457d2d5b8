package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/gate"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/spf13/cobra"
)

// The action gate's exit codes: 0 is auto, and every other outcome has its
// own, so a script can act on `airlock gate` without reading its output.
// A caller takes the action only on 0.
var gateExit = map[policies.Outcome]int{
	policies.OutcomeAuto:   ExitOK,
	policies.OutcomeDraft:  3,
	policies.OutcomeBlock:  4,
	policies.OutcomeBudget: 5,
	gate.Killed:            6,
}

// gateExitCode is outcome's exit code; an outcome it does not know blocks
// (4): only auto's 0 lets the caller act, so an unknown one must not.
func gateExitCode(outcome policies.Outcome) int {
	if code, ok := gateExit[outcome]; ok {
		return code
	}
	return gateExit[policies.OutcomeBlock]
}

func newGateCmd() *cobra.Command {
	var pf policyFlags
	var action, target, home string
	cmd := &cobra.Command{
		Use:   "gate --action ACTION --target TARGET [--home DIR]",
		Short: "Decide whether an agent may take an external action: auto, draft, block, budget or killed",
		Long: `Decide one external action an agent proposes (send a mail, open a pull
request) by the policy bundle's gate policy (package airlock.gate, pinned with
the presets), and print the outcome and its reason:

  auto    exit 0  take it; it counts against the action's daily cap
  draft   exit 3  do not take it: parked in today's memory file for a human
  block   exit 4  do not take it: refused (parked too); also when the gate
                  policy is missing or fails
  budget  exit 5  do not take it today: the action's daily cap is spent
  killed  exit 6  do not take it: the kill file (HOME/.auto-disabled) halts
                  every action; an event gate_killed goes to the inbox

Every decision is appended to HOME/auto-action-log.jsonl. Exit 1: the
decision could not be recorded (take no action); 10: the bundle is not the
pinned one; 2: usage.`,
		Example: `  airlock gate --action send_mail --target ops@example.test
  touch "$AIRLOCK_HOME/.auto-disabled"   # halt every action`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{"--action": action, "--target": target} {
				if v == "" {
					return &exitError{ExitUsage, fmt.Errorf("%s is required (see airlock gate --help)", flag)}
				}
			}
			h, err := resolveHome(home)
			if err != nil {
				return err
			}
			e, err := pf.engine(cmd.Context())
			if err != nil {
				return err
			}
			d, err := gate.Decide(cmd.Context(), h, e, action, target, time.Now)
			if errors.Is(err, gate.ErrInvalidAction) {
				return &exitError{ExitUsage, fmt.Errorf("--action: %w", err)}
			}
			// The policy's words, with the target in them: a custom gate's
			// reason may carry a target's control characters.
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (rule %s)\n", d.Outcome, spawn.Printable(d.Reason), spawn.Printable(d.Rule))
			if err != nil {
				return fmt.Errorf("%s %q not recorded, take no action: %w", action, target, err)
			}
			if code := gateExitCode(d.Outcome); code != ExitOK {
				return &exitError{code, errSilent}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&action, "action", "", "the proposed action's `NAME` (send_mail, open_pr), as the gate policy's tables name it")
	fl.StringVar(&target, "target", "", "what the action is on (`TARGET`: an address, a repository)")
	homeFlag(cmd, &home)
	pf.register(cmd, true)
	return cmd
}

package spawn

import (
	"errors"
	"slices"

	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/policies"
)

// Exit codes of `airlock spawn` beyond the sub-agent's own.
const (
	ExitOverBudget = 77 // EX_NOPERM-style: refused, nothing launched
	ExitIntegrity  = 10
	ExitUsage      = 2
	exitSetup      = 125 // the CLI's "sandbox setup failed"
)

// reserved are the codes that mean airlock's own answer. A sub-agent
// exiting with one of them must not pass for that answer (its 77 is no
// budget refusal), so it exits 1; result.json and the ledger keep its
// exact code. 124 is kept: a sub-agent's own 124 is timeout(1)'s, a
// timeout either way.
var reserved = []int{ExitUsage, ExitIntegrity, ExitOverBudget, exitSetup}

// ExitCode is `airlock spawn`'s exit code for Spawn's answer: 0 done; the
// sub-agent's exit code when it failed, except 1 for a code airlock
// reserves (2, 10, 77, 125), for one that is no exit status (0 with an
// unusable result, negative when its launcher was killed, above 255);
// 124 timeout; 77 over budget (a limit lowered under a spawn too); 10
// policy integrity; 2 usage; 1 any other
// failure to run it.
func ExitCode(r Result, err error) int {
	var ue *UsageError
	switch {
	case errors.As(err, &ue): // a limit asked above the operator's, too
		return ExitUsage
	case errors.Is(err, budget.ErrExhausted), errors.Is(err, budget.ErrUnusable), errors.Is(err, budget.ErrAboveLimit):
		return ExitOverBudget
	case errors.Is(err, policies.ErrIntegrity):
		return ExitIntegrity
	case err != nil:
		return 1
	}
	switch r.Status {
	case ledger.Done:
		return 0
	case ledger.Timeout:
		return ExitTimeout
	case ledger.Failed:
		if r.Exit < 1 || r.Exit > 255 || slices.Contains(reserved, r.Exit) {
			return 1
		}
		return r.Exit
	}
	return 0 // handed over (async): the task id was printed
}

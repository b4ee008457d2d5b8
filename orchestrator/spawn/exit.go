package spawn

import (
	"errors"

	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/policies"
)

// Exit codes of `airlock spawn` beyond the sub-agent's own.
const (
	ExitOverBudget = 77 // EX_NOPERM-style: refused, nothing launched
	ExitIntegrity  = 10
	ExitUsage      = 2
)

// ExitCode is `airlock spawn`'s exit code for Spawn's answer: 0 done; the
// sub-agent's exit code when it failed (1 when that was 0 but its result
// is unusable); 124 timeout; 77 over budget; 10 policy integrity; 2 usage;
// 1 any other failure to run it.
func ExitCode(r Result, err error) int {
	var ue *UsageError
	switch {
	case errors.Is(err, budget.ErrExhausted):
		return ExitOverBudget
	case errors.Is(err, policies.ErrIntegrity):
		return ExitIntegrity
	case errors.As(err, &ue):
		return ExitUsage
	case err != nil:
		return 1
	}
	switch r.Status {
	case ledger.Done:
		return 0
	case ledger.Timeout:
		return ExitTimeout
	case ledger.Failed:
		if r.Exit != 0 {
			return r.Exit
		}
		return 1
	}
	return 0 // handed over (async): the task id was printed
}

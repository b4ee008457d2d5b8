package spawn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/policies"
)

// The last stdout line decides: done only for exit 0 and a JSON object;
// usage.tokens is read when it is there; a timeout stays one.
func TestJudge(t *testing.T) {
	for _, c := range []struct {
		exit   int
		status ledger.Status
		last   string
		want   ledger.Status
		tokens int64 // -1: no usage
		spawn  int   // airlock spawn's exit code
	}{
		{0, "", `{"ok":true,"usage":{"tokens":7}}`, ledger.Done, 7, 0},
		{0, "", `{"ok":true}` + "\n\n", ledger.Done, -1, 0},
		{0, "", `{"usage":{"tokens":-3}}`, ledger.Done, -1, 0},
		{0, "", `not json`, ledger.Failed, -1, 1},
		{0, "", `[1,2]`, ledger.Failed, -1, 1},
		// No UTF-8, no JSON text: a lone 0x9b is a terminal's CSI.
		{0, "", "{\"msg\":\"\x9b2J\"}", ledger.Failed, -1, 1},
		{0, "", `null`, ledger.Failed, -1, 1},
		{0, "", ``, ledger.Failed, -1, 1},
		{3, "", `{"error":"x","usage":{"tokens":5}}`, ledger.Failed, 5, 3},
		{3, "", `oops`, ledger.Failed, -1, 3},
		{ExitTimeout, ledger.Timeout, `{"ok":true}`, ledger.Timeout, -1, ExitTimeout},
		{0, "", `{"usage":{"tokens":9223372036854775807}}`, ledger.Done, 9223372036854775807, 0}, // the budget caps it
		// The sub-agent's own code never passes for airlock's answers
		// or for no exit status.
		{-1, "", `{}`, ledger.Failed, -1, 1},
		{256, "", `{}`, ledger.Failed, -1, 1},
		{ExitUsage, "", `{}`, ledger.Failed, -1, 1},
		{ExitIntegrity, "", `{}`, ledger.Failed, -1, 1},
		{ExitOverBudget, "", `{}`, ledger.Failed, -1, 1},
		{125, "", `{}`, ledger.Failed, -1, 1},
		{ExitTimeout, "", `{}`, ledger.Failed, -1, ExitTimeout},
		{137, "", `{}`, ledger.Failed, -1, 137},
		// Nested deeper than MaxNesting: indented, each level is a line
		// as wide as its depth. Brackets in strings are no nesting.
		{0, "", `{"a":` + strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting) + `}`, ledger.Failed, -1, 1},
		{0, "", `{"a":` + strings.Repeat("[", MaxNesting-1) + strings.Repeat("]", MaxNesting-1) + `}`, ledger.Done, -1, 0},
		{0, "", `{"a":"` + strings.Repeat("[{", 1000) + `\"{{"}`, ledger.Done, -1, 0},
	} {
		r := Result{Exit: c.exit, Status: c.status}
		r.Judge([]byte(c.last))
		tokens := int64(-1)
		if r.Usage != nil {
			tokens = r.Usage.Tokens
		}
		if r.Status != c.want || tokens != c.tokens || ExitCode(r, nil) != c.spawn {
			t.Errorf("Judge(exit %d, %q) = %s, tokens %d, spawn exit %d (%s); want %s, %d, %d",
				c.exit, c.last, r.Status, tokens, ExitCode(r, nil), r.Detail, c.want, c.tokens, c.spawn)
		}
		if r.Status == ledger.Failed && r.Detail == "" {
			t.Errorf("Judge(exit %d, %q): failed without a detail", c.exit, c.last)
		}
	}
}

// Refusals map to their exit codes, whatever wraps them.
func TestExitCodeOfRefusals(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("reserve: %w", budget.ErrExhausted), ExitOverBudget},
		{fmt.Errorf("reserve: %w", budget.ErrUnusable), ExitOverBudget},
		{fmt.Errorf("open: %w", policies.ErrIntegrity), ExitIntegrity},
		{&UsageError{errors.New("no kind")}, ExitUsage},
		// Asked above the operator's limit: a usage error, before
		// anything is written; lowered under a spawn meanwhile: 77.
		{&UsageError{fmt.Errorf("limit: %w", budget.ErrAboveLimit)}, ExitUsage},
		{fmt.Errorf("reserve: %w", budget.ErrAboveLimit), ExitOverBudget},
		{errors.New("disk full"), 1},
	} {
		if got := ExitCode(Result{}, c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d; want %d", c.err, got, c.want)
		}
	}
}

// result.json is written compact: the sub-agent's value, however it
// nests, takes no more room in it than on its stdout line.
func TestWriteResultIsCompact(t *testing.T) {
	last := `{"a":` + strings.Repeat("[", MaxNesting-1) + strings.Repeat("1, ", 50000) + "1" + strings.Repeat("]", MaxNesting-1) + `}`
	r := Result{Task: "t-1"}
	if r.Judge([]byte(last)); r.Status != ledger.Done {
		t.Fatalf("judged %s (%s); want done", r.Status, r.Detail)
	}
	dir := t.TempDir()
	if err := WriteResult(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > len(last)+300 {
		t.Fatalf("result.json is %d bytes for a %d-byte result; want it no larger than the result and its fields", len(b), len(last))
	}
}

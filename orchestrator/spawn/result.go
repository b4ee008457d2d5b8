package spawn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/policies"
)

// ResultFile is the result's name in a sub-agent's directory.
const ResultFile = "result.json"

// ExitTimeout is a sub-agent's exit code when its timeout killed it, as
// timeout(1) reports.
const ExitTimeout = 124

// Result is subagents/<id>/result.json: the sub-agent's outcome and its
// last stdout line, parsed. The git substrate's runner writes the same.
type Result struct {
	Task      string          `json:"task"`
	Kind      string          `json:"kind"`
	Substrate string          `json:"substrate"`
	Status    ledger.Status   `json:"status"`
	Exit      int             `json:"exit_code"`
	Started   time.Time       `json:"started"`
	Ended     time.Time       `json:"ended"`
	Usage     *ledger.Usage   `json:"usage,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Detail    string          `json:"detail,omitempty"`

	// Plan is what a dry run would give the sub-agent; set only then.
	Plan *policies.Description `json:"-"`
}

// Judge sets the status, result and usage from the sub-agent's exit code
// (r.Exit) and its last stdout line: done only when it exited 0 and the
// line is a JSON object. A timeout stays a timeout.
func (r *Result) Judge(last []byte) {
	if r.Status == ledger.Timeout {
		return
	}
	last = bytes.TrimSpace(last)
	var obj map[string]json.RawMessage
	var refused string
	// Not UTF-8, it is no JSON text, and kept as the result it would reach
	// a terminal raw (a lone 0x9b is a CSI to one in an 8-bit locale).
	if err := json.Unmarshal(last, &obj); err != nil || obj == nil || !utf8.Valid(last) {
		refused = fmt.Sprintf("is not a JSON object: %q", Clip(last))
	} else if err := CheckNesting(last); err != nil {
		refused = err.Error()
	}
	if refused != "" {
		r.Status = ledger.Failed
		r.Detail = joinDetail(r.Detail, "the last stdout line "+refused)
		if r.Exit != 0 {
			r.Detail = joinDetail(fmt.Sprintf("exit code %d", r.Exit), r.Detail)
		}
		return
	}
	r.Result = json.RawMessage(last)
	var u struct {
		Usage *struct {
			Tokens *int64 `json:"tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(last, &u) == nil && u.Usage != nil && u.Usage.Tokens != nil && *u.Usage.Tokens >= 0 {
		r.Usage = &ledger.Usage{Tokens: *u.Usage.Tokens}
	}
	if r.Exit != 0 {
		r.Status = ledger.Failed
		r.Detail = joinDetail(fmt.Sprintf("exit code %d", r.Exit), r.Detail)
		return
	}
	r.Status = ledger.Done
}

// MaxNesting is how deeply a result's arrays and objects may nest: far
// more than a report needs, and little enough that no reader of it (the
// memory file, a terminal, a JSON decoder) pays for depth.
const MaxNesting = 64

// CheckNesting refuses a JSON value (valid JSON) whose arrays and objects
// nest deeper than MaxNesting: indented, each level of a value nested ten
// thousand deep is a line of its own as wide as its depth, and 80 KB of
// brackets made a result.json of 800 MB.
func CheckNesting(v []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range v {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > MaxNesting {
				return fmt.Errorf("nests arrays and objects deeper than %d levels", MaxNesting)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Clip keeps a detail readable whatever a sub-agent or its launcher
// printed: at most 200 bytes of b.
func Clip(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// WriteResult writes r as dir/result.json, whole (durable.WriteFile): a
// reader (collect, poll) never sees half of one. It is 0600, the
// operator's alone, as the sub-agent's output is. Compact: indented, the
// sub-agent's value would be as large as its nesting makes it.
func WriteResult(dir string, r Result) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(dir, ResultFile), append(raw, '\n'), 0o600); err != nil {
		return fmt.Errorf("result of %s: %w", r.Task, err)
	}
	return nil
}

// ReadResult reads dir/result.json.
func ReadResult(dir string) (Result, error) {
	var r Result
	raw, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, ResultFile), err)
	}
	return r, nil
}

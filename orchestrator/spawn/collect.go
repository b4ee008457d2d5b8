package spawn

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
	"unicode"

	"github.com/airlock-sandbox/airlock/internal/c1"
	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

// collectMarker starts each collected task's section; a task whose marker
// is already in the memory file is not added again, so collecting twice
// adds nothing twice.
const collectMarker = "<!-- airlock-task: %s -->"

// Collect merges the results of the tasks the ledger says ended on day
// (UTC, "YYYY-MM-DD") as done, failed or timeout into memory/<day>.md, one
// section each, and reports how many it added. The memory file is appended
// to under its flock (durable.Append), as the gate, parking drafts, shares
// it: O_NOFOLLOW, and the file made durable when created.
func Collect(h orchestrator.Home, day string) (int, error) {
	// day names the memory file: a date, never a path.
	if _, err := time.Parse(time.DateOnly, day); err != nil {
		return 0, fmt.Errorf("collect: day %q: want YYYY-MM-DD", day)
	}
	entries, _, err := ledger.Read(h.Ledger())
	if err != nil {
		return 0, fmt.Errorf("ledger %s: %w", h.Ledger(), err)
	}
	path := h.Memory(day)
	n := 0
	err = durable.Append(path, func(have []byte) ([]byte, error) {
		var add bytes.Buffer
		for _, t := range ledger.Fold(entries) {
			if t.Status != ledger.Done && t.Status != ledger.Failed && t.Status != ledger.Timeout {
				continue
			}
			// A whole line: a task's detail or result that names another
			// task's marker must not keep that task out.
			if orchestrator.Today(t.Ended) != day || bytes.Contains(have, []byte("\n"+fmt.Sprintf(collectMarker, t.ID)+"\n")) {
				continue
			}
			r, err := ReadResult(h.Subagent(t.ID))
			if errors.Is(err, fs.ErrNotExist) {
				// It never ran far enough to have a result: the
				// ledger says why.
				r = Result{Task: t.ID, Kind: t.Kind, Substrate: t.Substrate, Status: t.Status, Started: t.Started, Ended: t.Ended, Usage: t.Usage, Detail: t.Detail}
				if t.Exit != nil {
					r.Exit = *t.Exit
				}
			} else if err != nil {
				return nil, err
			}
			if add.Len() == 0 && len(have) == 0 {
				fmt.Fprintf(&add, "# %s\n", day)
			}
			section(&add, r)
			n++
		}
		return add.Bytes(), nil
	})
	if err != nil {
		return 0, fmt.Errorf("memory file %s: %w", path, err)
	}
	return n, nil
}

// section is one task in the memory file.
func section(b *bytes.Buffer, r Result) {
	fmt.Fprintf(b, "\n## %s: %s, %s (exit %d)\n"+collectMarker+"\n\n", r.Kind, r.Task, r.Status, r.Exit, r.Task)
	fmt.Fprintf(b, "- substrate %s, %s to %s", r.Substrate, r.Started.Format(time.RFC3339), r.Ended.Format(time.RFC3339))
	if r.Usage != nil {
		fmt.Fprintf(b, ", %d tokens", r.Usage.Tokens)
	}
	b.WriteString("\n")
	if r.Detail != "" {
		fmt.Fprintf(b, "- %s\n", Printable(r.Detail))
	}
	if len(r.Result) > 0 {
		fmt.Fprintf(b, "\n```json\n%s\n```\n", c1.Escape(r.Result))
	}
}

// Printable is s on one line with no control characters: a detail may end
// with a sub-agent's own last line of stderr, whose escapes would reach the
// terminal of whoever reads it (the memory file, the ledger's table, what
// a spawn or its poll prints).
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

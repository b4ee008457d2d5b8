package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/policies"
)

// The action log only grows, and each decision counts the day's auto
// actions under its flock: reading it whole would make every decision
// slower than the last. Lines are appended in time order (their TS is
// taken under that flock), so the day's are at the end: the log is read
// backwards, a chunk at a time, down to the first line stamped before the
// day began, less clockSlack.

// clockSlack is how far a clock stepped back may have stamped a line
// before an earlier one: lines that far before the day are still read
// past (not counted), so a step back of up to this much hides none of the
// day's auto actions (a count too low would let more through).
const clockSlack = time.Hour

// tailChunk is how much of the log one read takes.
const tailChunk = 64 << 10

// countAuto counts day's (UTC, YYYY-MM-DD) auto decisions by action in the
// log r of size bytes, reading from its end back to the first decision
// stamped before the day began, less clockSlack. Lines that are not whole
// decisions (a torn last line) are skipped.
func countAuto(r io.ReaderAt, size int64, day string) (map[string]int, error) {
	start, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return nil, fmt.Errorf("day %q: %w", day, err)
	}
	cutoff := start.Add(-clockSlack)
	counts := map[string]int{}
	var carry []byte // the start of a line whose end the last chunk read
	for end := size; end > 0; {
		from := max(end-tailChunk, 0)
		buf := make([]byte, end-from, end-from+int64(len(carry)))
		if _, err := r.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		buf = append(buf, carry...)
		lines := bytes.Split(buf, []byte{'\n'})
		first := 0
		if from > 0 {
			// Its start is in the chunk before.
			carry, first = lines[0], 1
		}
		for i := len(lines) - 1; i >= first; i-- {
			var d Decision
			if len(bytes.TrimSpace(lines[i])) == 0 || json.Unmarshal(lines[i], &d) != nil || d.Action == "" || d.Outcome == "" {
				continue
			}
			if d.TS.Before(cutoff) {
				return counts, nil
			}
			if d.Outcome == policies.OutcomeAuto && orchestrator.Today(d.TS) == day {
				counts[d.Action]++
			}
		}
		end = from
	}
	return counts, nil
}

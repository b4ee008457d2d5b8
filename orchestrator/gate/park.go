package gate

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/durable"
)

// ParkedHeading heads the memory file's section of parked actions.
const ParkedHeading = "## Parked actions"

// park appends d's line to the memory file's parked actions: under the
// section when it is the file's last, else under a new heading at the end.
// What is there is never rewritten: others (`airlock collect`) append to
// the same file, under the same flock (durable.Append).
func park(path string, d Decision) error {
	err := durable.Append(path, func(raw []byte) ([]byte, error) {
		var b bytes.Buffer
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			b.WriteByte('\n')
		}
		if lastHeading(raw) != ParkedHeading {
			if len(raw) > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(ParkedHeading + "\n\n")
		}
		b.WriteString(parkedLine(d))
		return b.Bytes(), nil
	})
	if err != nil {
		return fmt.Errorf("memory file %s: %w", path, err)
	}
	return nil
}

// parkedLine is one line, whatever the agent put in the target or the
// policy in the reason: the target quoted, the reason's whitespace folded.
func parkedLine(d Decision) string {
	return fmt.Sprintf("- %s %s %s %s: %s (rule %s)\n", d.TS.Format("15:04:05Z"), d.Outcome, d.Action,
		strconv.Quote(d.Target), strings.Join(strings.Fields(d.Reason), " "), d.Rule)
}

// lastHeading is the file's last "## " heading line, "" when it has none.
func lastHeading(raw []byte) string {
	last := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "## ") {
			last = strings.TrimRight(line, " \t\r")
		}
	}
	return last
}

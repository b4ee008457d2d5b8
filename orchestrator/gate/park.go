package gate

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParkedHeading heads the memory file's section of parked actions.
const ParkedHeading = "## Parked actions"

// park appends d's line to the memory file's parked actions: under the
// section when it is the file's last, else under a new heading at the end.
// What is there is never rewritten: others (`airlock collect`) write the
// same file, under the same flock.
func park(path string, d Decision) error {
	f, err := openLocked(path)
	if err != nil {
		return fmt.Errorf("memory file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return fmt.Errorf("memory file %s: %w", path, err)
	}
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
	if _, err := f.Write(b.Bytes()); err != nil {
		return fmt.Errorf("memory file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("memory file: %w", err)
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

// Package c1 escapes the C1 control characters (U+0080 to U+009F) in JSON,
// which encoding/json leaves raw: what a sandbox or a sub-agent wrote ends
// up in details and results, and a terminal that prints the JSON acts on a
// raw CSI or OSC of them.
package c1

import (
	"fmt"
	"io"
)

// Escape is JSON raw with its C1 control characters written as \u00XX.
// Outside strings, JSON has no such bytes.
func Escape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] == 0xc2 && i+1 < len(raw) && raw[i+1] >= 0x80 && raw[i+1] <= 0x9f {
			out = fmt.Appendf(out, `\u%04x`, raw[i+1])
			i++
			continue
		}
		out = append(out, raw[i])
	}
	return out
}

// Writer writes JSON to W with Escape applied, a write at a time: for
// writers of whole values or lines (an Encoder, Fprintln), which never
// split a character between writes.
type Writer struct{ W io.Writer }

func (c Writer) Write(p []byte) (int, error) {
	if _, err := c.W.Write(Escape(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

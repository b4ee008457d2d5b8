// Package clip cuts what a client or a sandbox chose (a path, a name) to a
// size a log line can hold: anyone who reaches a port writes lines, and the
// disk they fill is the audit log's.
package clip

import (
	"fmt"
	"unicode/utf8"
)

// String is s cut to at most n bytes (at a rune's start), marked as cut
// with its whole length; s as it is when it fits.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…(%d bytes)", len(s))
}

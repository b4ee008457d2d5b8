// Package nodeopts reads and sets the V8 heap limit in NODE_OPTIONS: the
// --max-old-space-size (MB) that the gateway watchdog raises after a heap
// exhaustion, through the supervisor for a pod's service or in a plain
// process's restart command.
package nodeopts

import (
	"strconv"
	"strings"
)

// heapFlags are the spellings of the flag (V8 takes - and _ alike).
var heapFlags = []string{"--max-old-space-size", "--max_old_space_size"}

// MaxHeapMB bounds a heap limit airlock sets (an operator's restart, a
// watchdog's --max-heap-mb): more is a typo, not a machine.
const MaxHeapMB = 65536

// nodeOptionWords splits NODE_OPTIONS as Node does: on spaces, a double-
// quoted part kept in one word (its quotes with it).
func nodeOptionWords(s string) []string {
	var words []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted && i+1 < len(s):
			cur.WriteByte(c)
			i++
			c = s[i]
		case (c == ' ' || c == '\t' || c == '\n') && !quoted:
			if cur.Len() > 0 {
				words = append(words, cur.String())
				cur.Reset()
			}
			continue
		}
		cur.WriteByte(c)
	}
	if cur.Len() > 0 {
		words = append(words, cur.String())
	}
	return words
}

// heapWord reports whether w is the heap flag, and its value when it is
// the --flag=N form (inline false: the value is the next word).
func heapWord(w string) (value string, inline, ok bool) {
	for _, f := range heapFlags {
		if w == f {
			return "", false, true
		}
		if v, found := strings.CutPrefix(w, f+"="); found {
			return v, true, true
		}
	}
	return "", false, false
}

// HeapMB is the heap limit NODE_OPTIONS sets, 0 when none (the last one
// counts, as for Node).
func HeapMB(opts string) int {
	words := nodeOptionWords(opts)
	mb := 0
	for i := 0; i < len(words); i++ {
		v, inline, ok := heapWord(words[i])
		if !ok {
			continue
		}
		if !inline && i+1 < len(words) {
			i++
			v = words[i]
		}
		if n, err := strconv.Atoi(v); err == nil {
			mb = n
		}
	}
	return mb
}

// WithHeap is opts with its heap limit set to mb: every heap flag already
// there (either form) removed, the other words kept in order.
func WithHeap(opts string, mb int) string {
	words := nodeOptionWords(opts)
	kept := make([]string, 0, len(words)+1)
	for i := 0; i < len(words); i++ {
		if _, inline, ok := heapWord(words[i]); ok {
			if !inline {
				i++ // its value
			}
			continue
		}
		kept = append(kept, words[i])
	}
	return strings.Join(append(kept, "--max-old-space-size="+strconv.Itoa(mb)), " ")
}

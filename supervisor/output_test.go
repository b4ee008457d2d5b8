package supervisor

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestLineWriterTail: the tail holds the instance's last lines, oldest
// first, each cut at tailLineMax, however much it wrote; reset forgets it.
func TestLineWriterTail(t *testing.T) {
	l := &lineWriter{prefix: "svc", w: io.Discard}
	for i := range 1000 {
		fmt.Fprintf(l, "line %d\n", i)
	}
	for range 3 {
		l.Write([]byte(strings.Repeat("x", maxLine)))
	}
	l.Write([]byte("unfinished"))
	l.flush()
	got := l.lastLines()
	if len(got) != tailLines {
		t.Fatalf("%d lines kept, want %d", len(got), tailLines)
	}
	// 3 pieces of maxLine, then the flushed "unfinished".
	if first, want := got[0], fmt.Sprintf("line %d", 1000-tailLines+4); first != want {
		t.Errorf("oldest line kept %q, want %q", first, want)
	}
	for _, line := range got[tailLines-4 : tailLines-1] {
		if len(line) != tailLineMax {
			t.Errorf("a long line kept with %d bytes, want it cut at %d", len(line), tailLineMax)
		}
	}
	if last := got[tailLines-1]; last != "unfinished" {
		t.Errorf("last line %q, want the flushed unfinished one", last)
	}
	l.reset()
	if got := l.lastLines(); got != nil {
		t.Errorf("after reset: %q, want nothing", got)
	}
}

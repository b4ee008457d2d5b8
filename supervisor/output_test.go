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

// Written to the operator's terminal, a service's control characters are
// made visible (an escape sequence could set the title, the clipboard, or
// make the terminal type an answer into the shell); tab stays, and
// elsewhere (a journal, a file) the line passes as it was.
func TestLineWriterEscapesForATerminal(t *testing.T) {
	const line = "red \x1b[31mtext\x1b]52;c;ZWNobyBwd25lZA==\a\tand C1 \u009b2J\n"
	for _, escape := range []bool{true, false} {
		var out strings.Builder
		l := &lineWriter{prefix: "svc", w: &out, escape: escape}
		io.WriteString(l, line)
		want := "[svc] " + line
		if escape {
			want = "[svc] red \\x1b[31mtext\\x1b]52;c;ZWNobyBwd25lZA==\\x07\tand C1 \\x9b2J\n"
		}
		if out.String() != want {
			t.Errorf("escape %v: wrote %q; want %q", escape, out.String(), want)
		}
	}
}

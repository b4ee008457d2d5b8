package sandbox

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// What a sandbox writes to a terminal it was not given reaches it as
// text, colours and cursor moves, and without anything the terminal
// would answer into its input: whole, or split between writes anywhere.
func TestAnswerless(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"text", "plain text\ttab\r\nnext\b line\a", "plain text\ttab\r\nnext\b line\a"},
		{"UTF-8", "é ✓ 😀", "é ✓ 😀"},
		{"colours", "\x1b[31mred\x1b[0m \x1b[38;2;1;2;3mrgb\x1b[m \x1b[4:3mcurly", "\x1b[31mred\x1b[0m \x1b[38;2;1;2;3mrgb\x1b[m \x1b[4:3mcurly"},
		{"cursor moves and erases", "\x1b[2A\x1b[10;5H\x1b[2K\x1b[J", "\x1b[2A\x1b[10;5H\x1b[2K\x1b[J"},
		{"cursor position report", "a\x1b[6nb", "ab"},
		{"device attributes", "\x1b[c\x1b[0c\x1b[>c\x1b[=c", ""},
		{"title reported", "\x1b]0;rm -rf ~\x07\x1b[21t", ""},
		{"clipboard set and read", "\x1b]52;c;cm0gLXJmIH4K\x1b\\\x1b]52;c;?\x1b\\", ""},
		{"colour queries", "\x1b]11;?\x07\x1b]4;1;?\x07", ""},
		{"DECRQSS and XTGETTCAP", "\x1bP$qm\x1b\\\x1bP+q544e\x1b\\", ""},
		{"mode queries and private modes", "\x1b[?2004$p\x1b[?1000h\x1b[?25l", ""},
		{"ENQ, SO, SI", "a\x05b\x0ec\x0fd", "abcd"},
		{"ESC and one", "\x1bZ\x1bc\x1b7\x1b8x", "x"},
		{"ESC with intermediates", "\x1b(B\x1b[m\x1b)0\x1b#8\x1b%Gx", "\x1b[mx"},
		{"C1 controls", "a\u009b6n\u009d0;t\u0007b\u0085c", "a6n0;t\abc"},
		{"a raw C1 byte", "a\x9b6nb", "a?6nb"},
		{"invalid UTF-8", "a\xe2\x28b\xffc", "a?(b?c"},
		{"a string ended by a new sequence", "\x1b]0;x\x1b[31mred", "\x1b[31mred"},
		{"a string cancelled", "\x1b]0;x\x18after", "after"},
		{"a control inside a CSI", "\x1b[3\n1m", "\n1m"},
		{"a CSI too long", "\x1b[" + strings.Repeat("1;", 100) + "mx", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole bytes.Buffer
			a := &answerless{w: &whole}
			if n, err := a.Write([]byte(tc.in)); n != len(tc.in) || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(tc.in))
			}
			if whole.String() != tc.want {
				t.Errorf("written whole: %q; want %q", whole.String(), tc.want)
			}
			var split bytes.Buffer
			a = &answerless{w: &split}
			for i := range len(tc.in) {
				a.Write([]byte{tc.in[i]})
			}
			if split.String() != tc.want {
				t.Errorf("written a byte at a time: %q; want %q", split.String(), tc.want)
			}
		})
	}
}

// A sandbox launched off the terminal's foreground, its output the user's
// terminal, reaches it through the launcher's relay without a query.
func TestOffTerminalOutputIsAnswerless(t *testing.T) {
	testutil.RequireRoot(t, "the sandbox launcher")
	master, tty := testutil.OpenPty(t)
	c := base(t, "/bin/sh", "-c", `printf 'a\033[6nb\033[31mc\033[0m\n'`)
	network, err := NewNetwork(NetworkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	c.Stdout, c.Stderr = tty, tty
	p, err := Start(t.Context(), c, network)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	buf := make([]byte, 100)
	n, err := master.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "ab\x1b[31mc\x1b[0m\r\n" {
		t.Errorf("the terminal got %q; want the text and colours without the cursor report", got)
	}
}

// Relaying a sandbox's own terminal, everything passes while the launch
// holds the foreground; in the background only what answerless passes,
// and a sequence begun in the foreground is cut (CAN) before the rest can
// complete it: what follows is text to the terminal, and passes as text.
func TestAnswerlessInTheBackgroundOnly(t *testing.T) {
	var got bytes.Buffer
	fg := true
	a := &answerless{w: &got, passAll: func() bool { return fg }}
	a.Write([]byte("\x1b[6n\x1b]52;c;"))
	fg = false
	a.Write([]byte("?\x07\x1b[6nx\x1b[31my"))
	fg = true
	a.Write([]byte("\x1b[6n"))
	if want := "\x1b[6n\x1b]52;c;\x18?\ax\x1b[31my\x1b[6n"; got.String() != want {
		t.Errorf("relayed %q; want %q", got.String(), want)
	}
	// A long write the foreground loses on its way (the terminal held it,
	// full, while ^Z suspended the launch) passes no more once it is lost.
	got.Reset()
	writes := 0
	a = &answerless{w: &got, passAll: func() bool { writes++; return writes == 1 }}
	long := strings.Repeat("x", 3*passChunk) + "\x1b[6n"
	if n, err := a.Write([]byte(long)); n != len(long) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if want := strings.Repeat("x", passChunk) + "\x18" + strings.Repeat("x", 2*passChunk); got.String() != want {
		t.Errorf("a long write whose foreground was lost on its way relayed %d bytes ending %q; want the first chunk, CAN, and the rest answerless", got.Len(), got.String()[max(0, got.Len()-8):])
	}
	// Whatever the filter made of what the foreground passed (a control
	// inside a CSI, which the terminal carries out and goes on; a C1
	// CSI), the background begins with CAN.
	for _, fgPart := range []string{"\x1b[6\b", "\x1b[6\x7f", "\x1b[6\x00", "\u009b6", "\u009d52;c;", "plain"} {
		got.Reset()
		fg = true
		a = &answerless{w: &got, passAll: func() bool { return fg }}
		a.Write([]byte(fgPart))
		fg = false
		a.Write([]byte("n"))
		if want := fgPart + "\x18n"; got.String() != want {
			t.Errorf("after %q in the foreground, relayed %q; want %q", fgPart, got.String(), want)
		}
	}
}

// The relay notes whether what it passed as it is may have asked the
// terminal something, whose answer close then waits for: any escape, ENQ
// or C1 control that may begin a query, passed in the foreground, written
// whole or split anywhere; not colours, cursor moves or erases, nor plain
// text, nor anything filtered in the background.
func TestAnswerlessNotesWhatMayAsk(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		fg, want bool
	}{
		{"text", "plain text\r\n\té ✓", true, false},
		{"colours", "\x1b[31mred\x1b[0m \x1b[38;2;1;2;3mrgb\x1b[m \x1b[4:3mcurly\r\n", true, false},
		{"cursor moves and erases", "\x1b[2A\x1b[10;5H\x1b[H\x1b[2K\x1b[J", true, false},
		{"a CSI unfinished", "\x1b[31mred\x1b[1;3", true, true},
		{"an ESC unfinished", "red\x1b", true, true},
		{"a cursor report request", "a\x1b[6n", true, true},
		{"a query after colours", "\x1b[31mred\x1b[0m\r\n\x1b[c", true, true},
		{"device attributes", "\x1b[>c", true, true},
		{"a private mode", "\x1b[?25l", true, true},
		{"an intermediate", "\x1b[2 q", true, true},
		{"a control inside a CSI", "\x1b[3\n1m", true, true},
		{"a CSI too long", "\x1b[" + strings.Repeat("1;", 100) + "m", true, true},
		{"an OSC", "\x1b]11;?\x07", true, true},
		{"a DCS", "\x1bP$qm\x1b\\", true, true},
		{"an APC", "\x1b_Gi=1,a=q;\x1b\\", true, true},
		{"another escape", "\x1bZ", true, true},
		{"DECSC", "\x1b7", true, true},
		{"ENQ", "\x05", true, true},
		{"a raw CSI", "\x9b6n", true, true},
		{"a C1 DCS", "\u0090$qm\u009c", true, true},
		{"a C1 APC", "\u009fGa=q\u009c", true, true},
		{"in the background", "\x1b[6n\x05\x9b6n", false, false},
	} {
		check := func(how string, a *answerless) {
			if got := a.mayHaveAsked(); got != tc.want {
				t.Errorf("%s: asked %v after %q written %s; want %v", tc.name, got, tc.in, how, tc.want)
			}
		}
		passAll := func() bool { return tc.fg }
		a := &answerless{w: io.Discard, passAll: passAll}
		a.Write([]byte(tc.in))
		check("whole", a)
		a = &answerless{w: io.Discard, passAll: passAll}
		for i := range len(tc.in) {
			a.Write([]byte{tc.in[i]})
		}
		check("a byte at a time", a)
		a = &answerless{w: io.Discard, passAll: passAll}
		a.Write([]byte(strings.Repeat("x", passChunk-3) + tc.in))
		check("across chunks", a)
	}
}

// On a UTF-8 terminal (IUTF8), a byte of 0x80 to 0x9F that continues a
// character (emoji, ❯, CJK) is no C1 control, and arms no drain: a C1
// character (U+009B, C2 9B) or a byte that continues nothing still does,
// written whole or split anywhere. On any other terminal, which may take
// each such byte for an 8-bit C1, all of them do.
func TestAnswerlessNotesC1ByTheTerminalsEncoding(t *testing.T) {
	for _, tc := range []struct {
		name, in     string
		utf8, latin1 bool // asked, by the terminal's encoding
	}{
		{"emoji", "done 🎉 🚀 😀", false, true},
		{"a prompt", "~/src ❯ ", false, true},
		{"CJK", "漢字をかきます 語", false, true},
		{"a C1 CSI character", "a\u009b6n", true, true},
		{"a C1 OSC character", "\u009d52;c;?\u009c", true, true},
		{"a raw CSI", "a\x9b6n", true, true},
		{"a continuation after ASCII", "ab\x9f", true, true},
		{"a continuation past a character's end", "é\x9d", true, true},
		{"a character cut short", "\xe2\x9dx\x9b", true, true},
		{"an overlong start", "\xe0\x9b", true, true},
		{"a surrogate's", "\xed\xa0\x9b", true, true},
		{"a character unfinished", "\xf0\x9f\x9b", false, true},
	} {
		for _, utf8 := range []bool{true, false} {
			want := tc.latin1
			if utf8 {
				want = tc.utf8
			}
			check := func(how string, a *answerless) {
				if got := a.mayHaveAsked(); got != want {
					t.Errorf("%s (utf8 %v): asked %v after %q written %s; want %v", tc.name, utf8, got, tc.in, how, want)
				}
			}
			fg := func() bool { return true }
			a := &answerless{w: io.Discard, passAll: fg, utf8: utf8}
			a.Write([]byte(tc.in))
			check("whole", a)
			a = &answerless{w: io.Discard, passAll: fg, utf8: utf8}
			for i := range len(tc.in) {
				a.Write([]byte{tc.in[i]})
			}
			check("a byte at a time", a)
			a = &answerless{w: io.Discard, passAll: fg, utf8: utf8}
			a.Write([]byte(strings.Repeat("x", passChunk-3) + tc.in))
			check("across chunks", a)
		}
	}
}

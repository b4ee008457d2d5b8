package sandbox

import (
	"io"
	"strings"
	"unicode/utf8"
)

// answerless is what a sandbox without a terminal writes to the user's:
// its text, colours (SGR), cursor moves and erases, and nothing that makes
// a terminal answer. A terminal answers a query (a cursor report, its
// attributes, its title or clipboard read back, an answerback for ENQ) by
// typing the answer into its input, and off the terminal's foreground that
// input is another program's: the user's shell, or a pager in the same
// pipeline (less runs !COMMAND), which read it as typed. A title or a
// clipboard the sandbox set first comes back as text of its choosing:
// keystrokes pushed in, as TIOCSTI would (refused by the seccomp filter).
// So only CSI sequences that never answer pass, and no string sequence
// (OSC, DCS, APC, PM, SOS) or other escape at all.
//
// It keeps its place between writes: a sequence or a character split
// between two reads of the pipe is judged whole.
type answerless struct {
	w io.Writer
	// passAll, when set, says whether to pass everything on as it is (the
	// relay of a sandbox's own terminal, while the launch holds the
	// foreground: the answers are the sandbox's to read). The filter's
	// place starts afresh when that ends, with CAN to the terminal.
	passAll func() bool
	passed  bool // the last write passed everything
	// asked, that what passed as it is may have asked the terminal
	// something (noteAsks): an answer may still be on its way when the
	// relay stops reading the terminal.
	asked bool
	cut   []byte // a CSI that a chunk passed ended in, judged with the next
	// utf8, that the terminal reads UTF-8 (IUTF8 in its modes): a C1
	// control is then a character, U+0080 to U+009F, and a byte of 0x80 to
	// 0x9F that continues another character (most emoji, ❯, much of CJK)
	// is none. Otherwise (a Latin-1 terminal may take an 8-bit C1) every
	// such byte counts.
	utf8 bool
	// cont is how many bytes the UTF-8 character passed last still lacks,
	// the next in lo to hi; c2, that it began with 0xC2 (U+0080 to U+00BF).
	cont   int
	lo, hi byte
	c2     bool

	state termState
	csi   []byte // the CSI sequence being read, ESC [ included
	char  []byte // a UTF-8 character begun
	out   []byte
}

type termState int

const (
	inText       termState = iota
	inEscape               // after ESC
	inCSI                  // after ESC [
	inLongCSI              // in a CSI too long to keep, dropped
	inEscapeMore           // in an ESC sequence's intermediates (ESC ( B), dropped
	inString               // in an OSC, DCS, APC, PM or SOS string, dropped
)

// maxCSI bounds a CSI sequence kept whole: colours with many parameters
// (38;2;R;G;B, a few at once) fit; a longer one is dropped.
const maxCSI = 64

// passedCSI are the final bytes of the CSI sequences passed on, none of
// which a terminal answers: SGR (m), cursor moves (A to H) and erases (J,
// K).
const passedCSI = "mABCDEFGHJK"

// passChunk is how much passes at a time while everything passes: the
// foreground is looked at again between chunks, so that a write the
// terminal holds (full, draining while ^Z suspends the launch) does not
// carry what follows into the background unlooked at.
const passChunk = 1 << 10

func (a *answerless) Write(p []byte) (int, error) {
	for n := 0; n < len(p); {
		a.out = a.out[:0]
		pass := a.passAll != nil && a.passAll()
		if a.passed && !pass {
			// The terminal may be inside a sequence it was passed so
			// far, whatever this filter's place (a terminal carries out
			// a control inside a CSI, and takes U+009B for one): CAN
			// ends any there, before anything of the rest can complete
			// it (a clipboard query's "?" and BEL, say). Outside one it
			// does nothing.
			a.out = append(a.out, 0x18)
			a.state, a.char, a.cut = inText, a.char[:0], a.cut[:0]
		}
		a.passed = pass
		chunk := p[n:]
		if pass && len(chunk) > passChunk {
			chunk = chunk[:passChunk]
		}
		out := chunk
		if pass && !a.asked {
			a.noteAsks(chunk)
		}
		if !pass {
			for _, b := range chunk {
				a.byte(b)
			}
			out = a.out
		}
		if len(out) > 0 {
			if _, err := a.w.Write(out); err != nil {
				return n, err
			}
		}
		n += len(chunk)
	}
	return len(p), nil
}

// noteAsks notes in asked whether p, passed as it is after what passed
// before, may have asked the terminal something: any ESC, ENQ (an
// answerback), or DCS, SCI, CSI, OSC, PM or APC as a C1 control (a raw
// byte, or UTF-8's character of one: a terminal may take either for an
// 8-bit one; on a UTF-8 terminal, a byte that continues a character is
// no C1) does, but for the CSI sequences plainCSI passes, which programs
// write most (colours at every prompt). A CSI that p ends in is judged
// with what follows, or counts if nothing does (mayHaveAsked). Once
// asked, nothing more is looked at.
func (a *answerless) noteAsks(p []byte) {
	if len(a.cut) > 0 {
		a.cut = append(a.cut, p...)
		p = a.cut
	}
	for i := 0; i < len(p); i++ {
		if a.c1(p[i]) {
			a.asked = true
			return
		}
		switch p[i] {
		case 0x05:
			a.asked = true
			return
		case 0x1b:
			j := i + 2 // past its parameters and intermediates
			for j < len(p) && p[j] >= 0x20 && p[j] <= 0x3f {
				j++
			}
			switch {
			case i+1 < len(p) && p[i+1] != '[', j-i > maxCSI,
				j < len(p) && (p[j] < 0x40 || p[j] > 0x7e || !plainCSI(p[i:j+1])):
				a.asked = true
				return
			case j >= len(p):
				a.cut = append(a.cut[:0], p[i:]...)
				return
			}
			i = j
		}
	}
	a.cut = a.cut[:0]
}

// c1 says whether b, after what passed before, may be taken for a C1
// control that asks (DCS, SCI, CSI, OSC, PM or APC), and follows UTF-8's
// characters across writes.
func (a *answerless) c1(b byte) bool {
	asks := b == 0x90 || b >= 0x9a && b <= 0x9f && b != 0x9c
	if !a.utf8 {
		return asks
	}
	if a.cont > 0 && b >= a.lo && b <= a.hi {
		a.cont--
		a.lo, a.hi = 0x80, 0xbf
		c2 := a.c2
		a.c2 = false
		return c2 && asks
	}
	// A character cut short by b, or none begun.
	a.cont, a.c2, a.lo, a.hi = 0, false, 0x80, 0xbf
	switch {
	case b >= 0xc2 && b <= 0xdf:
		a.cont, a.c2 = 1, b == 0xc2
	case b >= 0xe0 && b <= 0xef:
		a.cont = 2
		if b == 0xe0 {
			a.lo = 0xa0
		} else if b == 0xed {
			a.hi = 0x9f
		}
	case b >= 0xf0 && b <= 0xf4:
		a.cont = 3
		if b == 0xf0 {
			a.lo = 0x90
		} else if b == 0xf4 {
			a.hi = 0x8f
		}
	default: // ASCII, or a byte that continues no character
		return asks
	}
	return false
}

// mayHaveAsked says whether what passed as it is may have asked the
// terminal something: a CSI left unfinished counts, what followed it
// unknown.
func (a *answerless) mayHaveAsked() bool {
	return a.asked || len(a.cut) > 0
}

func (a *answerless) byte(b byte) {
	switch a.state {
	case inEscape:
		switch b {
		case '[':
			a.state, a.csi = inCSI, append(a.csi[:0], 0x1b, '[')
		case ']', 'P', '_', '^', 'X': // OSC, DCS, APC, PM, SOS
			a.state = inString
		case 0x1b:
		default: // none passed (ESC Z asks for identity)
			a.escapeEnd(b)
		}
	case inEscapeMore:
		a.escapeEnd(b)
	case inCSI:
		switch {
		case b >= 0x40 && b <= 0x7e: // the final byte
			a.csi = append(a.csi, b)
			if plainCSI(a.csi) {
				a.out = append(a.out, a.csi...)
			}
			a.state = inText
		case b >= 0x20 && b <= 0x3f && len(a.csi) < maxCSI: // parameters, intermediates
			a.csi = append(a.csi, b)
		case b >= 0x20 && b <= 0x3f:
			a.state = inLongCSI
		default: // a control in the sequence ends it, dropped
			a.state = inText
			a.text(b)
		}
	case inLongCSI:
		switch {
		case b >= 0x40 && b <= 0x7e:
			a.state = inText
		case b < 0x20 || b > 0x7e:
			a.state = inText
			a.text(b)
		}
	case inString:
		switch b {
		case 0x07, 0x18, 0x1a: // BEL ends it; CAN and SUB cancel it
			a.state = inText
		case 0x1b: // ESC \ ends it, and any ESC begins a sequence
			a.state = inEscape
		}
	default:
		a.text(b)
	}
}

// escapeEnd takes a byte of an ESC sequence that is no CSI or string, all
// of it dropped: intermediates (0x20 to 0x2F: ESC ( B, ESC # 8) until its
// final byte; a control ends it, and is taken as text.
func (a *answerless) escapeEnd(b byte) {
	switch {
	case b >= 0x20 && b <= 0x2f:
		a.state = inEscapeMore
	case b >= 0x30 && b <= 0x7e:
		a.state = inText
	default:
		a.state = inText
		a.text(b)
	}
}

// plainCSI says whether a whole CSI sequence is passed on: a final byte of
// passedCSI after parameters that are numbers only (no private marker,
// such as ? or >, and no intermediate byte).
func plainCSI(seq []byte) bool {
	for _, c := range seq[2 : len(seq)-1] {
		if (c < '0' || c > '9') && c != ';' && c != ':' {
			return false
		}
	}
	return strings.IndexByte(passedCSI, seq[len(seq)-1]) >= 0
}

// text takes a byte outside any sequence: printable ASCII and UTF-8, tab,
// line feed, carriage return, backspace and bell pass; an invalid byte is
// '?'; any other control (ENQ, SO, SI, and C1's, U+0080 to U+009F) is
// dropped.
func (a *answerless) text(b byte) {
	if len(a.char) > 0 || b >= utf8.RuneSelf {
		if b < utf8.RuneSelf || utf8.RuneStart(b) && len(a.char) > 0 {
			// A character cut short by this byte.
			a.out = append(a.out, '?')
			a.char = a.char[:0]
			if b < utf8.RuneSelf {
				a.text(b)
				return
			}
		}
		a.char = append(a.char, b)
		if !utf8.FullRune(a.char) {
			return
		}
		r, n := utf8.DecodeRune(a.char)
		switch {
		case r == utf8.RuneError && n <= 1:
			a.out = append(a.out, '?')
		case r >= 0x80 && r <= 0x9f:
		default:
			a.out = append(a.out, a.char[:n]...)
		}
		a.char = a.char[:0]
		return
	}
	switch {
	case b == 0x1b:
		a.state = inEscape
	case b >= 0x20 && b < 0x7f, b == '\t', b == '\n', b == '\r', b == '\b', b == 0x07:
		a.out = append(a.out, b)
	}
}

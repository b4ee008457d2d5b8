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
	state   termState
	csi     []byte // the CSI sequence being read, ESC [ included
	char    []byte // a UTF-8 character begun
	out     []byte
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
			a.state, a.char = inText, a.char[:0]
		}
		a.passed = pass
		chunk := p[n:]
		if pass && len(chunk) > passChunk {
			chunk = chunk[:passChunk]
		}
		out := chunk
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

package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// lineWriter passes a service's output on line by line, each prefixed with
// the service's name, so that the services' interleaved output stays
// readable in one journal. A line is written whole or not at all. It keeps
// the instance's last lines too: the evidence of how it died (a V8 heap
// exhaustion says so only there) for the status.
type lineWriter struct {
	prefix string
	w      io.Writer
	// escape makes control characters visible (\x1b): w is a terminal,
	// the operator's, whose escape sequences (a title, the clipboard, an
	// answer typed into the shell's input) are not a sandbox's to send.
	escape bool
	mu     sync.Mutex
	buf    []byte
	tail   tailRing
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	// Through Control, not Fd: Fd would make a descriptor the shell
	// shares blocking.
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var terr error
	if err := rc.Control(func(fd uintptr) { _, terr = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); err != nil {
		return false
	}
	return terr == nil
}

// visible is b with its control characters but tab and newline (C0, DEL,
// and C1 in UTF-8) written as \xNN.
func visible(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '\t' || c == '\n':
		case c < 0x20 || c == 0x7f:
			out = fmt.Appendf(out, "\\x%02x", c)
			continue
		case c == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			out = fmt.Appendf(out, "\\x%02x", b[i+1])
			i++
			continue
		}
		out = append(out, c)
	}
	return out
}

// maxLine bounds a line kept waiting for its newline: a service writing
// without newlines is passed on in pieces of this size.
const maxLine = 64 << 10

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) < maxLine {
				return len(p), nil
			}
			i = len(l.buf) - 1
		}
		l.emit(l.buf[:i+1])
		l.buf = l.buf[i+1:]
	}
}

// emit writes one line (its newline added when it lacks one) and keeps it
// in the tail.
func (l *lineWriter) emit(b []byte) {
	line := make([]byte, 0, len(l.prefix)+3+len(b)+1)
	line = append(line, '[')
	line = append(line, l.prefix...)
	line = append(line, "] "...)
	if l.escape {
		line = append(line, visible(b)...)
	} else {
		line = append(line, b...)
	}
	if line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	l.w.Write(line)
	l.tail.add(bytes.TrimSuffix(b, []byte("\n")))
}

// flush passes on an unfinished line, ended with a newline: the instance
// that wrote it has exited, and the next one's output must not be glued
// to it.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = l.buf[:0]
	}
}

// lastLines is the instance's last lines, oldest first.
func (l *lineWriter) lastLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail.lines()
}

// reset forgets the tail: a new instance starts.
func (l *lineWriter) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail = tailRing{}
}

// The tail's bounds: enough for a V8 heap report's last words, and at most
// ~80 KiB per service whatever it writes.
const (
	tailLines   = 40
	tailLineMax = 2 << 10
)

// tailRing holds the last tailLines lines, each cut at tailLineMax bytes.
type tailRing struct {
	ring [tailLines]string
	next int // where the next line goes
	n    int // lines held
}

func (t *tailRing) add(b []byte) {
	if len(b) > tailLineMax {
		b = b[:tailLineMax]
	}
	t.ring[t.next] = string(b)
	t.next = (t.next + 1) % tailLines
	t.n = min(t.n+1, tailLines)
}

func (t *tailRing) lines() []string {
	if t.n == 0 {
		return nil
	}
	out := make([]string, 0, t.n)
	for i := t.next - t.n; i < t.next; i++ {
		out = append(out, t.ring[(i+tailLines)%tailLines])
	}
	return out
}

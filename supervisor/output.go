package supervisor

import (
	"bytes"
	"io"
	"sync"
)

// lineWriter passes a service's output on line by line, each prefixed with
// the service's name, so that the services' interleaved output stays
// readable in one journal. A line is written whole or not at all.
type lineWriter struct {
	prefix string
	w      io.Writer
	mu     sync.Mutex
	buf    []byte
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
		line := make([]byte, 0, len(l.prefix)+3+i+1)
		line = append(line, '[')
		line = append(line, l.prefix...)
		line = append(line, "] "...)
		line = append(line, l.buf[:i+1]...)
		if line[len(line)-1] != '\n' {
			line = append(line, '\n')
		}
		l.w.Write(line)
		l.buf = l.buf[i+1:]
	}
}

// flush passes on an unfinished line, ended with a newline: the instance
// that wrote it has exited, and the next one's output must not be glued
// to it.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.w.Write(append(append([]byte("["+l.prefix+"] "), l.buf...), '\n'))
		l.buf = l.buf[:0]
	}
}

package proxy

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// closingBody is a request body as http.Server gives it: after Close, a
// read is an error, not EOF.
type closingBody struct {
	io.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("http: invalid Read on closed Body")
	}
	return b.Reader.Read(p)
}

// A body read to its end stays at its end for every later read, without
// asking its reader again: net/http's transport reads once more past
// Content-Length, and the server may have closed the body meanwhile (it
// does when it writes the answer), which would fail that read and cut the
// upstream connection the answer is being relayed from.
func TestBodyGuardEndsOnce(t *testing.T) {
	body := &closingBody{Reader: strings.NewReader("hello")}
	g := newBodyGuard(body, func(time.Time) error { return nil }, time.Minute)
	if got, err := io.ReadAll(io.LimitReader(g, 5)); string(got) != "hello" || err != nil {
		t.Fatalf("read %q, %v", got, err)
	}
	if n, err := g.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("at its end: %d, %v; want EOF", n, err)
	}
	body.closed = true // the server wrote its answer
	if n, err := g.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read again once the server closed the body: %d, %v; want EOF, as before", n, err)
	}
	g.abandon(0)
	if n, err := g.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after abandoning a body at its end: %d, %v; want EOF", n, err)
	}
}

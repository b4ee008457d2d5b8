package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// seqTS stamps appendSeq's events: with a fixed time (no trailing zero
// trimmed) and a detail padded to a fixed size, every line of a service
// has the same length, which tests of rotation count on.
var seqTS = time.Date(2026, 11, 23, 13, 0, 0, 123456789, time.UTC)

// seqEvent is appendSeq's event number i: Detail is i padded to pad bytes.
func seqEvent(service string, i, pad int) Event {
	d := fmt.Sprint(i)
	if len(d) < pad {
		d += " " + strings.Repeat("x", pad-len(d)-1)
	}
	return Event{TS: seqTS, Source: "test", Kind: "seq", Severity: Info, Service: service, Detail: d}
}

// appendSeq appends service's events seq 0, 1, ... (n of them; 0: until an
// error), calling acked (when set) after each Append returned.
func appendSeq(l *Log, service string, n, pad int, acked func(string, int)) error {
	for i := 0; n == 0 || i < n; i++ {
		if err := l.Append(seqEvent(service, i, pad)); err != nil {
			return err
		}
		if acked != nil {
			acked(service, i)
		}
	}
	return nil
}

// seq is an appendSeq event's number.
func seq(t testing.TB, e Event) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscan(e.Detail, &i); err != nil {
		t.Fatalf("event %+v: not one of appendSeq's: %v", e, err)
	}
	return i
}

// checkSeqs checks that events hold, for each service of want, seq 0 to
// want-1 exactly once and in order, and nothing else.
func checkSeqs(t testing.TB, events []Event, want map[string]int) {
	t.Helper()
	next := map[string]int{}
	for _, e := range events {
		if _, ok := want[e.Service]; !ok {
			t.Fatalf("unexpected event %+v", e)
		}
		if got := seq(t, e); got != next[e.Service] {
			t.Fatalf("%s: seq %d after %d: want each once, in order", e.Service, got, next[e.Service]-1)
		}
		next[e.Service]++
	}
	for svc, n := range want {
		if next[svc] != n {
			t.Errorf("%s: %d events, want %d", svc, next[svc], n)
		}
	}
}

// checkFiles checks the chain byte by byte, under Read: every file ends
// its last line, every line is one event, and no file passes maxBytes unless
// one line alone does. It returns how many files there are.
func checkFiles(t testing.TB, path string, maxBytes int64) int {
	t.Helper()
	nums, err := listed(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, num := range slices.Backward(nums) {
		file := name(path, num)
		b, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Errorf("%s does not end its last line: ...%q", file, b[max(0, len(b)-40):])
		}
		lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
		if int64(len(b)) > maxBytes && len(lines) > 1 {
			t.Errorf("%s is %d bytes, over %d, with %d lines", file, len(b), maxBytes, len(lines))
		}
		for _, line := range lines {
			var e Event
			if err := json.Unmarshal(line, &e); err != nil {
				t.Errorf("%s: line %.60q is not an event: %v", file, line, err)
			}
		}
	}
	return n
}

// collector gathers what Follow passes it.
type collector struct {
	mu     sync.Mutex
	events []Event
	seen   chan struct{} // signalled (non-blocking) after each event
}

func newCollector() *collector { return &collector{seen: make(chan struct{}, 1)} }

func (c *collector) add(e Event) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
	select {
	case c.seen <- struct{}{}:
	default:
	}
}

// waitFor waits until an event satisfies ok or follow ends (its error
// arrives on errc), and returns the events so far.
func (c *collector) waitFor(t testing.TB, errc <-chan error, ok func(Event) bool) []Event {
	t.Helper()
	for {
		c.mu.Lock()
		got := append([]Event(nil), c.events...)
		c.mu.Unlock()
		for _, e := range got {
			if ok(e) {
				return got
			}
		}
		select {
		case <-c.seen:
		case err := <-errc:
			t.Fatalf("Follow returned %v before the awaited event; got %d events", err, len(got))
		}
	}
}

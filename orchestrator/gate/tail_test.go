package gate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// countingReader counts the bytes read from it.
type countingReader struct {
	r    *bytes.Reader
	read atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.read.Add(int64(n))
	return n, err
}

func logLine(t testing.TB, ts time.Time, action string, outcome policies.Outcome) []byte {
	t.Helper()
	b, err := json.Marshal(Decision{TS: ts, Action: action, Target: "o/r", Outcome: outcome, Rule: "r", Reason: "a reason long enough to make lines of some size", Policy: "sha256:p"})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// Today's auto actions are counted from the log's end: every one of them
// (across read chunks, past a line a clock stepped back stamped on the day
// before, but not a torn last line), none of the days before, and the
// days before are not read (a log of many days costs a decision what its
// last day holds, not the whole file).
func TestCountAutoReadsOnlyTheDay(t *testing.T) {
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	var log bytes.Buffer
	for i := range 5000 { // days of history, each an auto open_pr
		log.Write(logLine(t, day.Add(-72*time.Hour+time.Duration(i)*time.Second), "open_pr", policies.OutcomeAuto))
	}
	history := log.Len()
	want := map[string]int{}
	for i := range 600 { // today's, more than a chunk of them
		action := []string{"open_pr", "comment", "merge"}[i%3]
		outcome := policies.OutcomeAuto
		if i%5 == 0 {
			outcome = policies.OutcomeDraft
		} else {
			want[action]++
		}
		log.Write(logLine(t, day.Add(10*time.Minute+time.Duration(i)*time.Second), action, outcome))
		if i == 300 { // a clock stepped back 20 minutes, then on again
			log.Write(logLine(t, day.Add(-20*time.Minute), "open_pr", policies.OutcomeAuto))
		}
	}
	log.WriteString(`{"ts":"2026-11-23T01:00:00Z","action":"open_pr","outc`) // torn
	r := &countingReader{r: bytes.NewReader(log.Bytes())}
	got, err := countAuto(r, int64(log.Len()), "2026-11-23")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("countAuto = %v, %v; want %v", got, err, want)
	}
	if read, today := r.read.Load(), int64(log.Len()-history); read > today+2*tailChunk {
		t.Errorf("countAuto read %d bytes of a %d-byte log whose day holds %d: the days before were read", read, log.Len(), today)
	}
}

// A decision's count over a log of 100000 earlier decisions and 100 of
// the day.
func BenchmarkCountAuto(b *testing.B) {
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	var log bytes.Buffer
	for i := range 100000 {
		log.Write(logLine(b, day.Add(-30*24*time.Hour+time.Duration(i)*time.Second), "open_pr", policies.OutcomeAuto))
	}
	for i := range 100 {
		log.Write(logLine(b, day.Add(time.Duration(i)*time.Second), "open_pr", policies.OutcomeAuto))
	}
	r := bytes.NewReader(log.Bytes())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := countAuto(r, int64(log.Len()), "2026-11-23"); err != nil {
			b.Fatal(err)
		}
	}
}

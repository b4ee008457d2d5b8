package events

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Writer processes killed with SIGKILL in the middle of a write(2) leave
// files Read accepts: every acknowledged event is there, torn lines are
// skipped, and the next writer's lines are whole. A write of a 2 MiB line
// takes long enough to be caught in the act (the live file not ending in a
// newline), and a fatal signal cuts it short between pages.
func TestWriterKilledMidWriteLeavesAReadableFile(t *testing.T) {
	const rounds, pad = 3, 2 << 20
	opts := Options{MaxBytes: 64 << 20, Keep: 10}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	acked := map[string]int{} // service: events acknowledged
	torn := 0
	for r := range rounds {
		s := writerSpec{Path: path, Name: fmt.Sprintf("r%d", r), Goroutines: 2, Pad: pad, Opts: opts}
		cmd, out := startWriter(t, s)
		if !out.Scan() {
			t.Fatalf("writer %d acknowledged nothing", r)
		}
		acked[strings.Fields(out.Text())[0]]++
		for !midLine(t, path) {
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for out.Scan() { // acknowledged before it died
			acked[strings.Fields(out.Text())[0]]++
		}
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("writer %d: %v, want killed", r, err)
		}
		if midLine(t, path) {
			torn++
		}
		got, err := Read(path, time.Time{})
		if err != nil {
			t.Fatalf("Read after killing writer %d: %v", r, err)
		}
		checkAcked(t, got, acked)
	}
	if torn == 0 {
		t.Fatalf("none of %d kills tore a line: the test tested nothing", rounds)
	}
	t.Logf("%d of %d kills tore a line", torn, rounds)

	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendSeq(l, "after", 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	checkAcked(t, got, acked)
	if last := got[len(got)-1]; last.Service != "after" {
		t.Errorf("last event is %s's, want the one appended after the crashes", last.Service)
	}
	if raw, _ := os.ReadFile(path); !bytes.HasSuffix(raw, []byte("\"recovered\":false}\n")) {
		t.Errorf("the live file does not end with the whole new line: ...%q", raw[max(0, len(raw)-60):])
	}
}

// midLine reports whether the live file ends inside a line: a write is
// under way, or was cut short.
func midLine(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return false
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	return last[0] != '\n'
}

// checkAcked checks that each service's events run from seq 0 without a
// gap or repeat, and that at least the acknowledged ones are there (one
// more may have been written before its writer died).
func checkAcked(t *testing.T, got []Event, acked map[string]int) {
	t.Helper()
	next := map[string]int{}
	for _, e := range got {
		if e.Service == "after" {
			continue
		}
		if i := seq(t, e); i != next[e.Service] {
			t.Fatalf("%s: seq %d after %d", e.Service, i, next[e.Service]-1)
		}
		next[e.Service]++
	}
	for svc, n := range acked {
		if next[svc] < n {
			t.Errorf("%s: %d events read, but %d were acknowledged", svc, next[svc], n)
		}
	}
}

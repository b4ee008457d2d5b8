package ledger_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

// checkWhole checks that the ledger holds exactly the tasks want, each
// once, every line whole.
func checkWhole(t *testing.T, path string, want map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte{'\n'}); n != len(want) || raw[len(raw)-1] != '\n' {
		t.Errorf("%d newlines (last byte %q), want %d whole lines", n, raw[len(raw)-1], len(want))
	}
	entries, torn, err := ledger.Read(path)
	if err != nil || torn != 0 {
		t.Fatalf("Read: torn %d, %v", torn, err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if !want[e.Task] || seen[e.Task] {
			t.Errorf("unexpected or repeated task %q", e.Task)
		}
		seen[e.Task] = true
		if e.TS.IsZero() || e.TS.Location() != time.UTC {
			t.Errorf("task %s: ts %v, want set, in UTC", e.Task, e.TS)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("read %d tasks, want %d", len(seen), len(want))
	}
}

func tasks(names []string, goroutines, n int) map[string]bool {
	want := map[string]bool{}
	for _, name := range names {
		for g := range goroutines {
			for i := range n {
				want[fmt.Sprintf("%s-%d-%d", name, g, i)] = true
			}
		}
	}
	return want
}

func TestAppendConcurrentGoroutines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue", "tasks.jsonl")
	if err := appendConcurrently(path, "g", 20, 10); err != nil {
		t.Fatal(err)
	}
	checkWhole(t, path, tasks([]string{"g"}, 20, 10))
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		if st, err := os.Stat(p); err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode(), err, want)
		}
	}
}

func TestAppendConcurrentProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	names := []string{"p0", "p1", "p2", "p3"}
	var cmds []*exec.Cmd
	for _, name := range names {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|5|10", appenderEnv, path, name))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("appender: %v", err)
		}
	}
	checkWhole(t, path, tasks(names, 5, 10))
}

// TestTornLine: a crash's half line is skipped and counted by Read, and
// the next Append's line is whole.
func TestTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := ledger.Append(path, ledger.Entry{Task: "a", Kind: "k", Status: ledger.Queued}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"ts":"2026-11-23T19:00:00Z","task":"b","kin`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	entries, torn, err := ledger.Read(path)
	if err != nil || torn != 1 || len(entries) != 1 || entries[0].Task != "a" {
		t.Fatalf("Read = %+v, torn %d, %v; want task a and 1 torn", entries, torn, err)
	}
	if err := ledger.Append(path, ledger.Entry{Task: "c", Kind: "k", Status: ledger.Running}); err != nil {
		t.Fatal(err)
	}
	entries, torn, err = ledger.Read(path)
	if err != nil || torn != 1 || len(entries) != 2 || entries[1].Task != "c" || entries[1].Status != ledger.Running {
		t.Fatalf("Read after Append = %+v, torn %d, %v; want tasks a, c and 1 torn", entries, torn, err)
	}
}

func TestReadMissing(t *testing.T) {
	entries, torn, err := ledger.Read(filepath.Join(t.TempDir(), "none.jsonl"))
	if entries != nil || torn != 0 || err != nil {
		t.Errorf("Read(missing) = %v, %d, %v; want nothing", entries, torn, err)
	}
}

func TestAppendRefusesAnEmptyEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	for _, e := range []ledger.Entry{{Status: ledger.Queued}, {Task: "a"}, {Task: "a", Status: "finished"}} {
		if err := ledger.Append(path, e); err == nil {
			t.Errorf("Append(%+v) = nil, want an error", e)
		}
	}
}

func TestFold(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 11, 23, 19, min, 0, 0, time.UTC) }
	zero, one := 0, 1
	entries := []ledger.Entry{
		{TS: at(0), Task: "a", Kind: "coder", Substrate: "local", Status: ledger.Queued},
		{TS: at(1), Task: "b", Kind: "writer", Substrate: "git", Status: ledger.Queued},
		{TS: at(2), Task: "a", Kind: "coder", Substrate: "local", Status: ledger.Running},
		{TS: at(3), Task: "c", Kind: "fitness", Substrate: "local", Status: ledger.Refused, Detail: "over budget"},
		{TS: at(4), Task: "a", Kind: "coder", Substrate: "local", Status: ledger.Done, Exit: &zero, Usage: &ledger.Usage{Tokens: 1234}},
		{TS: at(5), Task: "b", Status: ledger.Running},
		// A reconciler corrects b's outcome: the last status wins.
		{TS: at(6), Task: "b", Status: ledger.Timeout, Exit: &one, Detail: "did not commit"},
		{TS: at(7), Task: "b", Status: ledger.Failed, Detail: "result arrived: failed"},
	}
	got := ledger.Fold(entries)
	want := []ledger.Task{
		{ID: "a", Kind: "coder", Substrate: "local", Status: ledger.Done, Queued: at(0), Started: at(2), Ended: at(4), Exit: &zero, Usage: &ledger.Usage{Tokens: 1234}},
		{ID: "b", Kind: "writer", Substrate: "git", Status: ledger.Failed, Queued: at(1), Started: at(5), Ended: at(7), Exit: &one, Detail: "result arrived: failed"},
		{ID: "c", Kind: "fitness", Substrate: "local", Status: ledger.Refused, Ended: at(3), Detail: "over budget"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fold:\n got %s\nwant %s", show(got), show(want))
	}
}

// show prints tasks with their exit codes and usage, not their pointers.
func show(ts []ledger.Task) string {
	var b strings.Builder
	for _, t := range ts {
		exit, usage := any(nil), any(nil)
		if t.Exit != nil {
			exit = *t.Exit
		}
		if t.Usage != nil {
			usage = *t.Usage
		}
		fmt.Fprintf(&b, "\n  %+v exit=%v usage=%v", t, exit, usage)
	}
	return b.String()
}

func TestTerminal(t *testing.T) {
	for s, want := range map[ledger.Status]bool{
		ledger.Queued: false, ledger.Running: false,
		ledger.Done: true, ledger.Failed: true, ledger.Timeout: true, ledger.Refused: true,
	} {
		if got := ledger.Terminal(s); got != want {
			t.Errorf("Terminal(%s) = %v, want %v", s, got, want)
		}
	}
}

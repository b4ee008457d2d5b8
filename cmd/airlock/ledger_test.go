package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

// writeLedger writes a ledger into a fresh home: task "old" done two days
// ago, "run" running and "bad" failed today, and a torn last line.
func writeLedger(t *testing.T) orchestrator.Home {
	t.Helper()
	h := orchestrator.Home{Dir: t.TempDir()}
	now := time.Now().UTC()
	old := now.Add(-48 * time.Hour)
	zero, three := 0, 3
	for _, e := range []ledger.Entry{
		{TS: old, Task: "old", Kind: "writer", Substrate: "local", Status: ledger.Queued},
		{TS: old.Add(time.Second), Task: "old", Kind: "writer", Substrate: "local", Status: ledger.Running},
		{TS: old.Add(2 * time.Second), Task: "old", Kind: "writer", Substrate: "local", Status: ledger.Done, Exit: &zero, Usage: &ledger.Usage{Tokens: 1234}},
		{TS: now, Task: "run", Kind: "codex", Substrate: "git", Status: ledger.Queued},
		{TS: now, Task: "run", Kind: "codex", Substrate: "git", Status: ledger.Running},
		{TS: now, Task: "bad", Kind: "coder", Substrate: "local", Status: ledger.Queued},
		{TS: now, Task: "bad", Kind: "coder", Substrate: "local", Status: ledger.Failed, Exit: &three, Detail: "last stdout line\nis not JSON\x1b]0;retitled\a\x1b[2K\r"},
	} {
		if err := ledger.Append(h.Ledger(), e); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(h.Ledger(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"task":"torn","sta`)
	f.Close()
	return h
}

func TestLedgerTable(t *testing.T) {
	h := writeLedger(t)
	code, out, errs := airlock(t, "", "ledger", "--home", h.Dir)
	if code != ExitOK {
		t.Fatalf("airlock ledger = %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TASK ") {
		t.Fatalf("airlock ledger printed:\n%s\nwant a header and 3 rows", out)
	}
	for i, want := range [][]string{
		{"old ", "writer", "local", "done", " 0 ", "1234", "T"},
		{"run ", "codex", "git", "running", " - "},
		{"bad ", "coder", "local", "failed", " 3 ", "last stdout line is not JSON"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	// A detail may end with a sub-agent's last line of stderr: its
	// escapes are not the operator's terminal's to act on.
	if strings.ContainsAny(out, "\x1b\a\r") {
		t.Errorf("airlock ledger printed control characters of a detail: %q", out)
	}
	if !strings.Contains(errs, "ledger lines skipped") || !strings.Contains(errs, "skipped=1") && !strings.Contains(errs, `"skipped":1`) {
		t.Errorf("stderr %q: want the torn line reported", errs)
	}
}

func TestLedgerFilters(t *testing.T) {
	h := writeLedger(t)
	for _, tc := range []struct {
		args []string
		want string // the tasks, in order
	}{
		{nil, "old run bad"},
		{[]string{"--status", "failed"}, "bad"},
		{[]string{"--status", "done"}, "old"},
		{[]string{"--status", "timeout"}, ""},
		{[]string{"--today"}, "run bad"},
		{[]string{"--today", "--status", "running"}, "run"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"ledger", "--json", "--home", h.Dir}, tc.args...)
			code, out, errs := airlock(t, "", args...)
			if code != ExitOK {
				t.Fatalf("airlock %v = %d: %s", args, code, errs)
			}
			var ids []string
			dec := json.NewDecoder(strings.NewReader(out))
			for dec.More() {
				var task ledger.Task
				if err := dec.Decode(&task); err != nil {
					t.Fatalf("--json printed %q: %v", out, err)
				}
				ids = append(ids, task.ID)
			}
			if got := strings.Join(ids, " "); got != tc.want {
				t.Errorf("airlock %v = %q, want %q", args, got, tc.want)
			}
		})
	}
}

func TestLedgerJSON(t *testing.T) {
	h := writeLedger(t)
	code, out, errs := airlock(t, "", "ledger", "--json", "--status", "done", "--home", h.Dir)
	if code != ExitOK {
		t.Fatalf("airlock ledger --json = %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	for _, k := range []string{"task", "kind", "substrate", "status", "queued", "started", "ended", "exit_code", "usage"} {
		if _, ok := m[k]; !ok {
			t.Errorf("--json object %v lacks %q", m, k)
		}
	}
	// A task not yet ended has no "ended" at all, not year 1.
	_, out, _ = airlock(t, "", "ledger", "--json", "--status", "running", "--home", h.Dir)
	if strings.Contains(out, "ended") || strings.Contains(out, "0001-01-01") {
		t.Errorf("running task printed %q: want no ended time", out)
	}
}

func TestLedgerUsage(t *testing.T) {
	h := writeLedger(t)
	if code, _, errs := airlock(t, "", "ledger", "--status", "finished", "--home", h.Dir); code != ExitUsage || !strings.Contains(errs, `--status "finished"`) {
		t.Errorf("airlock ledger --status finished = %d, %q; want usage (2) naming the flag", code, errs)
	}
	// AIRLOCK_HOME is --home's knob.
	t.Setenv("AIRLOCK_HOME", h.Dir)
	if code, out, errs := airlock(t, "", "ledger", "--status", "failed"); code != ExitOK || !strings.Contains(out, "bad ") {
		t.Errorf("AIRLOCK_HOME=%s airlock ledger = %d, %q %q", h.Dir, code, out, errs)
	}
	// An empty home has an empty ledger.
	if code, out, _ := airlock(t, "", "ledger", "--home", filepath.Join(t.TempDir(), "new")); code != ExitOK || strings.Count(out, "\n") != 1 {
		t.Errorf("airlock ledger on a new home = %d, %q; want only the header", code, out)
	}
}

// What a pod's events say may end with what a sandbox printed: `airlock
// events` prints them with their C1 controls escaped, as ledger does.
func TestEventsEscapeC1(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent-inbox.jsonl")
	detail := "exited: a\u009b2J\u009d0;x\u0007"
	line, _ := json.Marshal(map[string]any{"ts": time.Now().UTC(), "source": "supervisor", "kind": "exit", "severity": "warning", "service": "svc", "detail": detail})
	if err := os.WriteFile(file, append(line, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := airlock(t, "", "events", "--file", file)
	if code != ExitOK || strings.ContainsAny(out, "\u009b\u009d") || !strings.Contains(out, `\u009b2J`) {
		t.Fatalf("airlock events --file = %d, %q, %s; want the detail with its C1 controls escaped", code, out, errs)
	}
	var back struct{ Detail string }
	if err := json.Unmarshal([]byte(out), &back); err != nil || back.Detail != detail {
		t.Errorf("the printed event reads back as %q, %v; want %q", back.Detail, err, detail)
	}
}

// A line cut to fit the table is cut before a character, never inside
// one: the rest of ⛛ (e2 9b 9b) cut after its first byte is no UTF-8, and
// its 0x9b a CSI to a terminal in an 8-bit locale.
func TestOneLineCutsOnACharacter(t *testing.T) {
	for pad := 90; pad < 100; pad++ {
		got := oneLine(strings.Repeat("a", pad) + strings.Repeat("⛛", 10))
		if !utf8.ValidString(got) || len(got) > 100 || !strings.HasSuffix(got, "...") {
			t.Errorf("oneLine of %d bytes and ⛛s = %q; want at most 100 bytes of UTF-8 ending in ...", pad, got)
		}
	}
}

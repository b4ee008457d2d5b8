package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// A task that ended yesterday, after yesterday's last collect, is merged
// by `collect --day` of that day; the default (today) leaves it out; a
// day that is not a date is a usage error and writes nothing.
func TestCollectDay(t *testing.T) {
	h := orchestrator.Home{Dir: t.TempDir()}
	ended := time.Now().UTC().Add(-24 * time.Hour)
	yesterday := orchestrator.Today(ended)
	for _, st := range []ledger.Status{ledger.Queued, ledger.Done} {
		if err := ledger.Append(h.Ledger(), ledger.Entry{TS: ended, Task: "late", Kind: "k", Substrate: "local", Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(h.Subagent("late"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := spawn.WriteResult(h.Subagent("late"), spawn.Result{Task: "late", Kind: "k", Status: ledger.Done, Result: json.RawMessage(`{"answer":42}`)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, ExitOK, "0 result(s) added to " + h.Memory(orchestrator.Today(time.Now()))},
		{[]string{"--today"}, ExitOK, "0 result(s)"},
		{[]string{"--day", yesterday}, ExitOK, "1 result(s) added to " + h.Memory(yesterday)},
		{[]string{"--day", yesterday}, ExitOK, "0 result(s)"},
		{[]string{"--day", "../../etc/x"}, ExitUsage, ""},
		{[]string{"--day", "2026-13-01"}, ExitUsage, ""},
		{[]string{"--day", yesterday, "--today"}, ExitUsage, ""},
	} {
		code, out, errs := airlock(t, "", append([]string{"collect", "--home", h.Dir}, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("collect %q = %d %q %s; want %d %q", tc.args, code, out, errs, tc.code, tc.out)
		}
	}
	raw, err := os.ReadFile(h.Memory(yesterday))
	if err != nil || strings.Count(string(raw), `"answer":42`) != 1 {
		t.Errorf("memory/%s.md = %s, %v; want the task once", yesterday, raw, err)
	}
}

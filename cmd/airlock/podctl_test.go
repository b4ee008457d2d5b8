package main

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/supervisor"
)

// `airlock status` says when events were not recorded: the inbox it names
// is silent about them.
func TestPrintStatusEventsFailed(t *testing.T) {
	for _, tc := range []struct {
		failed int64
		want   string // "" for no line
	}{
		{0, ""},
		{3, "3 not recorded there (see the supervisor's log)"},
	} {
		var out strings.Builder
		printStatus(&out, supervisor.Status{Pod: "p", Events: "/state/agent-inbox.jsonl", EventsFailed: tc.failed, Audit: "/state/audit.jsonl"})
		got := out.String()
		if has := strings.Contains(got, "not recorded"); has != (tc.want != "") || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%d failed: status printed\n%s\nwant %q", tc.failed, got, tc.want)
		}
		if !strings.Contains(got, "events: /state/agent-inbox.jsonl\n") || !strings.Contains(got, "audit:  /state/audit.jsonl\n") {
			t.Errorf("%d failed: the events and audit lines are not as before:\n%s", tc.failed, got)
		}
	}
}

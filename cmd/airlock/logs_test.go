package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

const reviewerInput = `{"sandbox": {"id": "s", "kind": "reviewer"},
	"process": {"pid": 7, "exe": "/usr/bin/curl", "sha256": ""},
	"request": {"phase": "request", "host": "api.github.com", "port": 443,
		"method": "GET", "path": "/repos/o/r/pulls"}}`

// A command that answers on stdout logs nothing ahead of its answer, an
// environment knob in force included, unless asked; asked, its lines are
// JSON when stderr is not a terminal.
func TestOneShotCommandsLogOnlyWhenAsked(t *testing.T) {
	_, hash, _ := airlock(t, "", "policy", "hash")
	t.Setenv("AIRLOCK_POLICY_SHA256", strings.TrimSpace(hash))
	for _, args := range [][]string{
		{"policy", "eval", "--preset", "reviewer"},
		{"policy", "explain", "--preset", "reviewer"},
		{"policy", "verify"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := airlock(t, reviewerInput, args...)
			if code != ExitOK || out == "" || errs != "" {
				t.Errorf("airlock %v = %d, stdout %q, stderr %q; want output and nothing on stderr", args, code, out, errs)
			}
			code, _, errs = airlock(t, reviewerInput, append(args, "--log-level", "info")...)
			if code != ExitOK || !hasJSONLine(errs, "environment knob in force", "AIRLOCK_POLICY_SHA256") {
				t.Errorf("airlock %v --log-level info = %d, stderr %q; want the knob's JSON line", args, code, errs)
			}
		})
	}
}

func hasJSONLine(s, msg, env string) bool {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		var line struct{ Msg, Env string }
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == msg && line.Env == env {
			return true
		}
	}
	return false
}

// On a terminal the log is text a person reads, without a time stamp.
func TestLogsAreTextOnATerminal(t *testing.T) {
	master, tty := testutil.OpenPty(t)
	code := run([]string{"policy", "verify", "--log-level", "info"}, strings.NewReader(""), io.Discard, tty)
	tty.Close()
	raw, _ := io.ReadAll(master) // EIO once the terminal is closed and drained
	got := string(raw)
	if code != ExitOK || !strings.Contains(got, `level=INFO msg="policy generation active"`) || strings.Contains(got, `{"`) || strings.Contains(got, "time=") {
		t.Errorf("policy verify on a terminal = %d, its log:\n%s\nwant text lines without a time", code, got)
	}
}

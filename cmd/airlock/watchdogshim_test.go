package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// watchdogShim runs `airlock watchdog shim ARGS` as run() does.
func watchdogShim(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return airlock(t, "", append([]string{"watchdog", "shim"}, args...)...)
}

func TestWatchdogShimUsageErrors(t *testing.T) {
	dir := t.TempDir()
	inbox, state := filepath.Join(dir, "inbox.jsonl"), filepath.Join(dir, "state.json")
	ok := []string{"--once", "--state", state, "--inbox", inbox, "--restart-cmd", "true"}
	// An inbox under a regular file cannot be opened: a command line the
	// checks let through by mistake then ends at once (exit 1), where it
	// would run a round, or a daemon that never ends.
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o600)
	stuck := filepath.Join(dir, "file", "inbox.jsonl")
	daemon := []string{"--interval", "1s", "--inbox", stuck, "--restart-cmd", "true"}
	once := []string{"--once", "--state", state, "--inbox", stuck, "--restart-cmd", "true"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no mode", []string{"--inbox", inbox, "--restart-cmd", "true"}, "--once"},
		{"both modes", append(ok, "--interval", "1s"), "exactly one of --once"},
		{"once without state", []string{"--once", "--inbox", inbox, "--restart-cmd", "true"}, "--once needs --state"},
		{"no recovery", []string{"--once", "--state", state, "--inbox", inbox}, "--admin-socket"},
		{"both recoveries", append(ok, "--admin-socket", "/run/x.sock"), "exactly one of --admin-socket"},
		{"pid file without command", []string{"--once", "--state", state, "--inbox", inbox, "--admin-socket", "/run/x.sock", "--pid-file", "/run/shim.pid"}, "--pid-file goes with --restart-cmd"},
		{"no inbox", []string{"--once", "--state", state, "--restart-cmd", "true"}, "--inbox is required"},
		{"bad url", append(ok, "--url", "127.0.0.1:8901"), "--url"},
		{"zero hung-after", append(ok, "--hung-after", "0"), "--hung-after"},
		{"zero probe timeout", append(ok, "--probe-timeout", "0s"), "must be positive"},
		{"metrics with once", append(once, "--metrics", "127.0.0.1:9464"), "--metrics is a daemon's"},
		{"metrics not on loopback", append(daemon, "--metrics", "0.0.0.0:9464"), "must be a loopback address"},
		{"metrics a name", append(daemon, "--metrics", "localhost:9464"), "must be a loopback address"},
		{"metrics without a port", append(daemon, "--metrics", "127.0.0.1"), "want 127.0.0.1:PORT"},
		{"metrics port zero", append(daemon, "--metrics", "127.0.0.1:0"), "want a port from 1 to 65535"},
		{"textfile with interval", append(daemon, "--textfile", filepath.Join(dir, "w.prom")), "--textfile is for --once"},
		{"textfile not .prom", append(once, "--textfile", filepath.Join(dir, "w.txt")), "reads only *.prom files"},
		{"unknown flag", append(ok, "--hung"), "unknown flag"},
		{"an argument", append(ok, "extra"), "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := watchdogShim(t, tc.args...)
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Errorf("watchdog shim %q = %d %q, want %d naming %q", tc.args, code, errs, ExitUsage, tc.want)
			}
			if _, err := os.Stat(inbox); err == nil {
				t.Errorf("a usage error opened the inbox")
			}
		})
	}
}

// The CLI, one-shot, against a real shim killed with SIGKILL: the restart
// command starts a new one, and the inbox and the textfile say so.
func TestWatchdogShimOnceRestartsAKilledShim(t *testing.T) {
	sh := startTestShim(t)
	dir := t.TempDir()
	inbox, prom := filepath.Join(dir, "agent-inbox.jsonl"), filepath.Join(dir, "watchdog-shim.prom")
	first := sh.pid()
	sh.kill(t)

	args := []string{"--once", "--url", sh.url, "--state", filepath.Join(dir, "state.json"), "--inbox", inbox, "--restart-cmd", sh.start, "--pid-file", sh.pidFile, "--textfile", prom}
	if code, out, errs := watchdogShim(t, args...); code != ExitOK || out != "shim recovered\n" {
		t.Fatalf("watchdog shim = %d %q %s", code, out, errs)
	}
	if sh.pid() == first || !sh.answers() {
		t.Errorf("pid %d (was %d), answers %v: want a new shim answering", sh.pid(), first, sh.answers())
	}
	if got, want := inboxWords(t, inbox), "watchdog-shim:shim/shim_dead/warning/false watchdog-shim:shim/restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
	wantMetrics(t, readFile(t, prom), `rounds_total{outcome="recovered"} 1`, `rounds_total{outcome="healthy"} 0`, `restarts_total{result="recovered"} 1`, `up 1`)
	if code, out, errs := watchdogShim(t, args...); code != ExitOK || out != "shim healthy\n" {
		t.Errorf("a second run = %d %q %s, want healthy", code, out, errs)
	}
	// The second run, a fresh process, goes on counting.
	wantMetrics(t, readFile(t, prom), `rounds_total{outcome="recovered"} 1`, `rounds_total{outcome="healthy"} 1`, `restarts_total{result="recovered"} 1`, `up 1`)
}

// No pod behind the admin socket: the watchdog cannot look, so it restarts
// nothing, says so once, and a --once run fails.
func TestWatchdogShimWithNoPodIsBlind(t *testing.T) {
	dir := t.TempDir()
	inbox := filepath.Join(dir, "agent-inbox.jsonl")
	args := []string{"--once", "--state", filepath.Join(dir, "state.json"), "--inbox", inbox, "--admin-socket", filepath.Join(dir, "admin.sock")}
	for range 2 {
		if code, out, errs := watchdogShim(t, args...); code != ExitError || !strings.Contains(errs, "shim blind") {
			t.Fatalf("watchdog shim with no pod = %d %q %q, want %d and blind", code, out, errs, ExitError)
		}
	}
	if got, want := inboxWords(t, inbox), "watchdog-shim:shim/unobservable/warning/false"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

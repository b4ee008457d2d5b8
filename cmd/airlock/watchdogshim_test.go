package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
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
// command starts a new one, and the inbox says so.
func TestWatchdogShimOnceRestartsAKilledShim(t *testing.T) {
	testutil.RequireTool(t, "python3") // the shim
	script, _ := filepath.Abs("../../watchdogs/testdata/shim.py")
	dir := t.TempDir()
	port := testutil.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/models", port)
	pidFile, inbox := filepath.Join(dir, "shim.pid"), filepath.Join(dir, "agent-inbox.jsonl")
	start := fmt.Sprintf("python3 %s %d & echo $! > %s", script, port, pidFile)
	pid := func() int {
		raw, _ := os.ReadFile(pidFile)
		p, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		return p
	}
	answers := func() bool {
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}).Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}
	if err := exec.Command("/bin/sh", "-c", start).Run(); err != nil {
		t.Fatal(err)
	}
	first := pid()
	t.Cleanup(func() { syscall.Kill(first, syscall.SIGKILL); syscall.Kill(pid(), syscall.SIGKILL) })
	testutil.WaitFor(t, "the shim to answer", answers)
	syscall.Kill(first, syscall.SIGKILL)
	testutil.WaitFor(t, "the killed shim to stop answering", func() bool { return !answers() })

	args := []string{"--once", "--url", url, "--state", filepath.Join(dir, "state.json"), "--inbox", inbox, "--restart-cmd", start, "--pid-file", pidFile}
	if code, out, errs := watchdogShim(t, args...); code != ExitOK || out != "shim recovered\n" {
		t.Fatalf("watchdog shim = %d %q %s", code, out, errs)
	}
	if pid() == first || !answers() {
		t.Errorf("pid %d (was %d), answers %v: want a new shim answering", pid(), first, answers())
	}
	evs, err := events.Read(inbox, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s:%s/%s/%s/%v", e.Source, e.Service, e.Kind, e.Severity, e.Recovered))
	}
	if want := "watchdog-shim:shim/shim_dead/warning/false watchdog-shim:shim/restart/info/true"; strings.Join(got, " ") != want {
		t.Errorf("inbox = %q, want %q", strings.Join(got, " "), want)
	}
	if code, out, errs := watchdogShim(t, args...); code != ExitOK || out != "shim healthy\n" {
		t.Errorf("a second run = %d %q %s, want healthy", code, out, errs)
	}
}

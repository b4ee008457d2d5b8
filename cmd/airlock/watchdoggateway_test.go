package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestWatchdogGatewayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	inbox, state := filepath.Join(dir, "inbox.jsonl"), filepath.Join(dir, "state.json")
	ok := []string{"--once", "--state", state, "--inbox", inbox, "--restart-cmd", "true", "--pid-file", "/run/gw.pid"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing to watch", []string{"--once", "--state", state, "--inbox", inbox, "--restart-cmd", "true"}, "needs --url or --pid-file"},
		{"a log for a pod", []string{"--once", "--state", state, "--inbox", inbox, "--admin-socket", "/run/x.sock", "--log", "/var/log/gw.log"}, "--log and --cgroup go with --restart-cmd"},
		{"a cgroup for a pod", []string{"--once", "--state", state, "--inbox", inbox, "--admin-socket", "/run/x.sock", "--cgroup", "/sys/fs/cgroup/gw"}, "--log and --cgroup go with --restart-cmd"},
		{"bad url", append(ok, "--url", "127.0.0.1:18789"), "--url"},
		{"heap above its cap", append(ok, "--heap-mb", "8192"), "--heap-mb 8192"},
		// The supervisor refuses a heap above 64 GiB: a cap above it
		// would have every restart past it refused.
		{"cap above the supervisor's", append(ok, "--max-heap-mb", "65537"), "--max-heap-mb 65537: at most 65536"},
		{"bad max memory", append(ok, "--max-memory", "lots"), `--max-memory "lots"`},
		{"no mode", []string{"--inbox", inbox, "--restart-cmd", "true", "--pid-file", "/run/gw.pid"}, "--once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := airlock(t, "", append([]string{"watchdog", "gateway"}, tc.args...)...)
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Errorf("watchdog gateway %q = %d %q, want %d naming %q", tc.args, code, errs, ExitUsage, tc.want)
			}
			if _, err := os.Stat(inbox); err == nil {
				t.Errorf("a usage error opened the inbox")
			}
		})
	}
}

// The CLI, one-shot, against a real Node gateway that runs out of heap:
// restarted with the next heap step, which the new process has in its
// NODE_OPTIONS.
func TestWatchdogGatewayOnceRaisesTheHeap(t *testing.T) {
	testutil.RequireTool(t, "node")
	gw := startTestServer(t, "node", "gateway.js", "/healthz", "NODE_OPTIONS=--max-old-space-size=32")
	old := gw.pid()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "agent-inbox.jsonl")
	args := []string{"watchdog", "gateway", "--once", "--url", gw.url, "--state", filepath.Join(dir, "state.json"), "--inbox", inbox,
		"--restart-cmd", gw.start, "--pid-file", gw.pidFile, "--log", gw.log, "--heap-mb", "32", "--max-heap-mb", "256"}
	if code, out, errs := airlock(t, "", args...); code != ExitOK || out != "gateway healthy\n" {
		t.Fatalf("watchdog gateway = %d %q %s", code, out, errs)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
	if resp, err := client.Get(gw.base + "/leak"); err == nil {
		resp.Body.Close()
	}
	testutil.WaitFor(t, "the gateway to run out of heap", func() bool { return syscall.Kill(old, 0) != nil })
	if code, out, errs := airlock(t, "", args...); code != ExitOK || out != "gateway recovered\n" {
		t.Fatalf("watchdog gateway = %d %q %s", code, out, errs)
	}
	if opts, mb := testutil.Environ(t, gw.pid(), "NODE_OPTIONS"), testutil.Environ(t, gw.pid(), "AIRLOCK_NODE_HEAP_MB"); opts != "--max-old-space-size=64" || mb != "64" {
		t.Errorf("the new gateway's NODE_OPTIONS %q, AIRLOCK_NODE_HEAP_MB %q: want the next heap step", opts, mb)
	}
	if got, want := inboxWords(t, inbox), "watchdog-gateway:gateway/gateway_heap_oom/warning/false watchdog-gateway:gateway/restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

package main

import (
	"fmt"
	"io"
	"net"
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

// testServer is a real server of the watchdogs' tests on a free loopback
// port (the shim, watchdogs/testdata/shim.py; the gateway, gateway.js),
// started by the kind of command a watchdog's --restart-cmd runs, which
// appends its output to log and records its pid in pidFile.
type testServer struct {
	base, url, start, pidFile, log string
}

func startTestShim(t *testing.T) *testServer {
	t.Helper()
	testutil.RequireTool(t, "python3")
	return startTestServer(t, "python3", "shim.py", "/v1/models")
}

// startTestServer starts the testdata server script with interpreter,
// env added to the first start's environment; path is the probed one.
func startTestServer(t *testing.T, interpreter, script, path string, env ...string) *testServer {
	t.Helper()
	script, err := filepath.Abs("../../watchdogs/testdata/" + script)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := testutil.FreePort(t)
	sh := &testServer{base: fmt.Sprintf("http://127.0.0.1:%d", port), pidFile: filepath.Join(dir, "server.pid"), log: filepath.Join(dir, "server.log")}
	sh.url = sh.base + path
	sh.start = fmt.Sprintf("%s %s %d >> %s 2>&1 & echo $! > %s", interpreter, script, port, sh.log, sh.pidFile)
	first := exec.Command("/bin/sh", "-c", sh.start)
	first.Env = append(os.Environ(), env...)
	if err := first.Run(); err != nil {
		t.Fatal(err)
	}
	pid := sh.pid()
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); syscall.Kill(sh.pid(), syscall.SIGKILL) })
	testutil.WaitFor(t, "the server to answer", sh.answers)
	return sh
}

// inboxWords are the inbox's lines as "source:service/kind/severity/recovered".
func inboxWords(t *testing.T, inbox string) string {
	t.Helper()
	evs, err := events.Read(inbox, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s:%s/%s/%s/%v", e.Source, e.Service, e.Kind, e.Severity, e.Recovered))
	}
	return strings.Join(got, " ")
}

// pid is the pid the pid file holds now: the last shim started.
func (sh *testServer) pid() int {
	raw, _ := os.ReadFile(sh.pidFile)
	p, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return p
}

func (sh *testServer) answers() bool {
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}).Get(sh.url)
	if err == nil {
		resp.Body.Close()
	}
	return err == nil
}

// kill SIGKILLs the shim and waits until it no longer answers.
func (sh *testServer) kill(t *testing.T) {
	t.Helper()
	syscall.Kill(sh.pid(), syscall.SIGKILL)
	testutil.WaitFor(t, "the killed shim to stop answering", func() bool { return !sh.answers() })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// hasMetrics reports whether text (the exposition format) holds each
// `NAME{LABELS} VALUE` of want, NAME without its airlock_watchdog_ prefix
// and LABELS without the shim watchdog's service and source.
func hasMetrics(text string, want ...string) bool {
	for _, w := range want {
		name, value, _ := strings.Cut(w, " ")
		labels := `service="shim",source="watchdog-shim"`
		if base, extra, ok := strings.Cut(name, "{"); ok {
			name, labels = base, strings.TrimSuffix(extra, "}")+","+labels
		}
		if !strings.Contains(text, "\nairlock_watchdog_"+name+"{"+labels+"} "+value+"\n") {
			return false
		}
	}
	return true
}

func wantMetrics(t *testing.T, text string, want ...string) {
	t.Helper()
	if !hasMetrics(text, want...) {
		t.Errorf("metrics lack one of %q:\n%s", want, text)
	}
}

// The daemon serves its metrics while it runs: a healthy shim's rounds,
// then the restart of a killed one.
func TestWatchdogShimDaemonServesMetrics(t *testing.T) {
	sh := startTestShim(t)
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	// The test binary is airlock (TestMain), and a real process is what
	// SIGTERM stops.
	cmd := exec.Command(os.Args[0], "watchdog", "shim", "--interval", "100ms", "--url", sh.url, "--inbox", filepath.Join(dir, "agent-inbox.jsonl"),
		"--restart-cmd", sh.start, "--pid-file", sh.pidFile, "--metrics", addr)
	// A file, not a pipe: the shim the daemon restarts inherits its
	// stderr and would hold a pipe, and Wait with it, open.
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	scrape := func() string {
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 2 * time.Second}).Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return "\n" + string(raw)
	}
	testutil.WaitFor(t, "/metrics to show a healthy round", func() bool {
		return hasMetrics(scrape(), `up 1`, `restarts_total{result="recovered"} 0`) && !hasMetrics(scrape(), `rounds_total{outcome="healthy"} 0`)
	})
	sh.kill(t)
	testutil.WaitFor(t, "/metrics to show the restart", func() bool {
		return hasMetrics(scrape(), `restarts_total{result="recovered"} 1`, `faults_total{kind="shim_dead"} 1`, `recovery_seconds_count 1`)
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the daemon after SIGTERM: %v\n%s", err, readFile(t, stderr.Name()))
	}
}

// A port the metrics cannot have fails the daemon (a watchdog, the proxy)
// at its start, naming the address, before it opens its inbox or serves.
// A process of its own: a daemon that did not fail would run on, and is
// killed after a while.
func TestMetricsPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	inbox := filepath.Join(dir, "agent-inbox.jsonl")
	for _, args := range [][]string{
		{"watchdog", "shim", "--interval", "1s", "--url", "http://127.0.0.1:9/v1/models", "--inbox", inbox, "--restart-cmd", "true"},
		{"proxy", "--listen", "127.0.0.1:0", "--preset", "strict", "--ca-dir", filepath.Join(dir, "ca"), "--audit-log", filepath.Join(dir, "audit.log")},
	} {
		t.Run(args[0], func(t *testing.T) {
			cmd := exec.Command(os.Args[0], append(args, "--metrics", ln.Addr().String())...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("%s --metrics on a taken port is still running after 20s: want it to fail at its start\n%s", args[0], stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != ExitError || !strings.Contains(stderr.String(), "--metrics "+ln.Addr().String()) {
				t.Errorf("%s --metrics on a taken port = %d %q, want %d naming it", args[0], code, stderr.String(), ExitError)
			}
			if _, err := os.Stat(inbox); err == nil {
				t.Errorf("the inbox was opened")
			}
		})
	}
}

// A one-shot run stopped (SIGTERM, as systemd's timeout does) in the
// middle of its probe found nothing: its textfile must not say healthy.
func TestWatchdogShimOnceStoppedMidProbeWritesNoTextfile(t *testing.T) {
	sh := startTestShim(t)
	dir := t.TempDir()
	prom := filepath.Join(dir, "watchdog-shim.prom")
	syscall.Kill(sh.pid(), syscall.SIGSTOP) // connections accepted, never answered
	cmd := exec.Command(os.Args[0], "watchdog", "shim", "--once", "--probe-timeout", "1m", "--url", sh.url, "--state", filepath.Join(dir, "state.json"),
		"--inbox", filepath.Join(dir, "agent-inbox.jsonl"), "--restart-cmd", sh.start, "--textfile", prom)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// The probe's connection is the process's only socket: once it is
	// there, the signal handler is too and the probe is waiting.
	testutil.WaitFor(t, "the probe's connection", func() bool {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); strings.HasPrefix(l, "socket:") {
				return true
			}
		}
		return false
	})
	cmd.Process.Signal(syscall.SIGTERM)
	// Its own clean stop, not SIGTERM's default action (which would also
	// leave no textfile).
	if err := cmd.Wait(); err != nil {
		t.Errorf("the stopped run: %v, want a clean exit", err)
	}
	if _, err := os.Stat(prom); err == nil {
		t.Errorf("a stopped run wrote its textfile:\n%s", readFile(t, prom))
	}
}

// A one-shot run while another on the same state is under way (a run by
// hand beside the timer's) does nothing and says so, with an exit status of
// its own: no round, no inbox line, no textfile counting from nothing.
func TestWatchdogOnceBusy(t *testing.T) {
	dir := t.TempDir()
	state, inbox, prom := filepath.Join(dir, "state.json"), filepath.Join(dir, "agent-inbox.jsonl"), filepath.Join(dir, "watchdog-shim.prom")
	held, err := os.OpenFile(state+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	code, out, errs := watchdogShim(t, "--once", "--url", fmt.Sprintf("http://127.0.0.1:%d/v1/models", testutil.FreePort(t)), "--state", state,
		"--inbox", inbox, "--restart-cmd", "true", "--settle", "1s", "--textfile", prom)
	if code != 75 || !strings.Contains(errs, "another run of this watchdog is under way") || !strings.Contains(errs, state) {
		t.Errorf("watchdog shim beside another run = %d %q %q; want 75, saying it is busy", code, out, errs)
	}
	if got := inboxWords(t, inbox); got != "" {
		t.Errorf("inbox = %q, want nothing", got)
	}
	for _, p := range []string{state, prom} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a busy run wrote %s", p)
		}
	}
}

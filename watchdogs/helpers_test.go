package watchdogs

import (
	"context"
	"fmt"
	"log/slog"
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

// shimEnv is a real shim (testdata/shim.py, a python3 process) on a free
// loopback port, started by the same kind of command the watchdog runs,
// which records its pid in a pid file.
type shimEnv struct {
	t                         *testing.T
	url                       string
	pidFile, inbox, statePath string
	start, crash              string // restart commands: a working shim, one that exits at once
	pids                      []int  // every shim seen, killed at cleanup
}

func newShimEnv(t *testing.T) *shimEnv {
	t.Helper()
	testutil.RequireTool(t, "python3") // the shim
	script, err := filepath.Abs("testdata/shim.py")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := testutil.FreePort(t)
	e := &shimEnv{t: t, url: fmt.Sprintf("http://127.0.0.1:%d/v1/models", port),
		pidFile: filepath.Join(dir, "shim.pid"), inbox: filepath.Join(dir, events.DefaultFile), statePath: filepath.Join(dir, "state.json")}
	e.start = fmt.Sprintf("python3 %s %d & echo $! > %s", script, port, e.pidFile)
	e.crash = fmt.Sprintf("python3 %s %d --crash & echo $! > %s", script, port, e.pidFile)
	t.Cleanup(func() {
		for _, pid := range append(e.pids, e.pid()) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// No output capture: the shim left in the background would hold the
	// pipe open and the wait with it.
	if err := exec.Command("/bin/sh", "-c", e.start).Run(); err != nil {
		t.Fatalf("starting the shim: %v", err)
	}
	e.pids = append(e.pids, e.pid())
	testutil.WaitFor(t, "the shim to answer", e.answers)
	return e
}

// pid is the pid the pid file holds now (0 before the first start).
func (e *shimEnv) pid() int {
	raw, _ := os.ReadFile(e.pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

func (e *shimEnv) answers() bool {
	c := http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := c.Get(e.url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// signal sends sig to the current shim.
func (e *shimEnv) signal(sig syscall.Signal) int {
	pid := e.pid()
	if err := syscall.Kill(pid, sig); err != nil {
		e.t.Fatalf("kill(%d, %v): %v", pid, sig, err)
	}
	return pid
}

// watchdog is a fresh Watchdog, as each one-shot run of the CLI makes,
// restarting with cmd.
func (e *shimEnv) watchdog(cmd string, hungAfter int, b Budget) *Watchdog {
	e.t.Helper()
	inbox, err := events.Open(e.inbox, events.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { inbox.Close() })
	return &Watchdog{
		Source: "watchdog-shim", Service: "shim",
		Probe:          NewHTTPProbe(e.url, 300*time.Millisecond, KindShimDead, KindShimHung, nil),
		Recover:        CommandRestart{Command: cmd, PidFile: e.pidFile, Timeout: 10 * time.Second},
		Budget:         b,
		StrikesToFault: hungAfter,
		Settle:         5 * time.Second,
		StatePath:      e.statePath,
		Inbox:          inbox,
		Log:            slog.New(slog.NewTextHandler(testWriter{e.t}, nil)),
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// lines is the inbox as "kind/severity/recovered" words, after checking
// the fields every watchdog line carries.
func (e *shimEnv) lines() string {
	e.t.Helper()
	evs, err := events.Read(e.inbox, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	var w []string
	for _, ev := range evs {
		if ev.Source != "watchdog-shim" || ev.Service != "shim" || ev.Detail == "" {
			e.t.Errorf("inbox line %+v: want source watchdog-shim, service shim and a detail", ev)
		}
		w = append(w, fmt.Sprintf("%s/%s/%v", ev.Kind, ev.Severity, ev.Recovered))
	}
	return strings.Join(w, " ")
}

func (e *shimEnv) once(w *Watchdog, want Outcome) Result {
	e.t.Helper()
	res, err := w.Once(context.Background())
	if err != nil {
		e.t.Fatalf("Once: %v", err)
	}
	if res.Outcome != want {
		e.t.Fatalf("Once = %v (%s: %s), want %v", res.Outcome, res.Kind, res.Detail, want)
	}
	return res
}

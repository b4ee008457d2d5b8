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
	"github.com/airlock-sandbox/airlock/internal/procstat"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// procEnv is a real server process on a free loopback port (the shim,
// testdata/shim.py; the gateway, testdata/gateway.js), started by the same
// kind of command the watchdog runs, which records its pid in a pid file
// and appends its output to a log.
type procEnv struct {
	t                              *testing.T
	source, service                string
	url, base                      string // the probed URL, and http://127.0.0.1:PORT
	pidFile, inbox, statePath, log string
	start, crash                   string // restart commands: a working server, one that exits at once
	pids                           []int  // every server seen, killed at cleanup
}

func newShimEnv(t *testing.T) *procEnv {
	t.Helper()
	testutil.RequireTool(t, "python3")
	return newProcEnv(t, "shim", "python3 testdata/shim.py", "/v1/models", "")
}

// newProcEnv starts the server (argv words before its port); in, when set,
// is a cgroup directory the server is started in.
func newProcEnv(t *testing.T, service, server, path, in string) *procEnv {
	t.Helper()
	words := strings.Fields(server)
	script, err := filepath.Abs(words[1])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := testutil.FreePort(t)
	e := &procEnv{t: t, source: "watchdog-" + service, service: service, base: fmt.Sprintf("http://127.0.0.1:%d", port),
		pidFile: filepath.Join(dir, service+".pid"), inbox: filepath.Join(dir, events.DefaultFile),
		statePath: filepath.Join(dir, "state.json"), log: filepath.Join(dir, service+".log")}
	e.url = e.base + path
	argv := fmt.Sprintf("%s %s %d", words[0], script, port)
	if in != "" {
		// The server's own pid joins the group, then becomes the
		// server: every byte it allocates is the group's.
		argv = fmt.Sprintf("sh -c 'echo $$ > %s/cgroup.procs && exec %s'", in, argv)
	}
	e.start = fmt.Sprintf("%s >> %s 2>&1 & echo $! > %s", argv, e.log, e.pidFile)
	e.crash = fmt.Sprintf("%s %s %d --crash >> %s 2>&1 & echo $! > %s", words[0], script, port, e.log, e.pidFile)
	t.Cleanup(func() {
		for _, pid := range append(e.pids, e.pid()) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// No output capture: the server left in the background would hold
	// the pipe open and the wait with it.
	if err := exec.Command("/bin/sh", "-c", e.start).Run(); err != nil {
		t.Fatalf("starting the %s: %v", service, err)
	}
	e.pids = append(e.pids, e.pid())
	testutil.WaitFor(t, "the "+service+" to answer", e.answers)
	return e
}

// pid is the pid the pid file holds now (0 before the first start).
func (e *procEnv) pid() int {
	raw, _ := os.ReadFile(e.pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

func (e *procEnv) answers() bool {
	c := http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := c.Get(e.url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// signal sends sig to the current server.
func (e *procEnv) signal(sig syscall.Signal) int {
	pid := e.pid()
	if err := syscall.Kill(pid, sig); err != nil {
		e.t.Fatalf("kill(%d, %v): %v", pid, sig, err)
	}
	return pid
}

// watchdog is a fresh Watchdog, as each one-shot run of the CLI makes,
// restarting with cmd.
func (e *procEnv) watchdog(cmd string, hungAfter int, b Budget) *Watchdog {
	e.t.Helper()
	inbox, err := events.Open(e.inbox, events.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { inbox.Close() })
	return &Watchdog{
		Source: e.source, Service: e.service,
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
func (e *procEnv) lines() string {
	e.t.Helper()
	var w []string
	for _, ev := range e.inboxEvents() {
		if ev.Source != e.source || ev.Service != e.service || ev.Detail == "" {
			e.t.Errorf("inbox line %+v: want source %s, service %s and a detail", ev, e.source, e.service)
		}
		w = append(w, fmt.Sprintf("%s/%s/%v", ev.Kind, ev.Severity, ev.Recovered))
	}
	return strings.Join(w, " ")
}

func (e *procEnv) inboxEvents() []events.Event {
	e.t.Helper()
	evs, err := events.Read(e.inbox, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func (e *procEnv) once(w *Watchdog, want Outcome) Result {
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

// gone reports whether pid has exited: no /proc entry, or a zombie.
func gone(pid int) bool {
	state, _, err := procstat.Stat(pid)
	return err != nil || procstat.Dead(state)
}

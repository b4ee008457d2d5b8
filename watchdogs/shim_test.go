package watchdogs

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

var wideBudget = Budget{Max: DefaultMaxRestarts, Window: DefaultWindow}

func TestShimKilledIsRestarted(t *testing.T) {
	e := newShimEnv(t)
	old := e.signal(syscall.SIGKILL)
	testutil.WaitFor(t, "the killed shim to stop answering", func() bool { return !e.answers() })

	res := e.once(e.watchdog(e.start, 3, wideBudget), Recovered)
	if res.Kind != KindShimDead {
		t.Errorf("kind = %q, want %q", res.Kind, KindShimDead)
	}
	if pid := e.pid(); pid == old || !e.answers() {
		t.Errorf("after the restart: pid %d (was %d), answers %v: want a new process answering", pid, old, e.answers())
	}
	if got, want := e.lines(), "shim_dead/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// A SIGSTOPped shim keeps its socket: connections are accepted and never
// answered. Each one-shot run is a fresh Watchdog, so the count of
// timeouts in a row lives only in the state file.
func TestShimStoppedIsFoundHungAcrossOneShotRunsAndReplaced(t *testing.T) {
	e := newShimEnv(t)
	old := e.signal(syscall.SIGSTOP)

	e.once(e.watchdog(e.start, 3, wideBudget), Suspect)
	e.once(e.watchdog(e.start, 3, wideBudget), Suspect)
	if got := e.lines(); got != "" {
		t.Errorf("inbox after two timeouts = %q, want nothing yet", got)
	}
	res := e.once(e.watchdog(e.start, 3, wideBudget), Recovered)
	if res.Kind != KindShimHung {
		t.Errorf("kind = %q, want %q", res.Kind, KindShimHung)
	}
	if !gone(old) {
		t.Errorf("the hung shim %d is still there", old)
	}
	if pid := e.pid(); pid == old || !e.answers() {
		t.Errorf("after the restart: pid %d (was %d), answers %v: want a new process answering", pid, old, e.answers())
	}
	if got, want := e.lines(), "shim_hung/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

func TestShimCrashLoopIsGivenUp(t *testing.T) {
	e := newShimEnv(t)
	e.signal(syscall.SIGKILL)
	testutil.WaitFor(t, "the killed shim to stop answering", func() bool { return !e.answers() })

	now := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	run := func(want Outcome) {
		t.Helper()
		w := e.watchdog(e.crash, 3, Budget{Max: 2, Window: time.Hour})
		w.Settle = 500 * time.Millisecond // the crashing shim never answers
		w.Now = func() time.Time { return now }
		e.once(w, want)
	}
	run(Failed)
	now = now.Add(time.Minute)
	run(Failed)
	const twoFailed = "shim_dead/warning/false restart/critical/false shim_dead/warning/false restart/critical/false"
	if got := e.lines(); got != twoFailed {
		t.Fatalf("inbox = %q, want %q", got, twoFailed)
	}
	now = now.Add(time.Minute)
	run(GaveUp)
	now = now.Add(time.Minute)
	run(GaveUp) // said once: no second line
	if got, want := e.lines(), twoFailed+" shim_dead/warning/false give_up/critical/false"; got != want {
		t.Fatalf("inbox = %q, want %q", got, want)
	}
	// Once the first restart leaves the window, one more is allowed; when
	// that fails too, giving up again is said again.
	now = now.Add(57 * time.Minute)
	run(Failed)
	now = now.Add(30 * time.Second)
	run(GaveUp)
	if got, want := e.lines(), twoFailed+" shim_dead/warning/false give_up/critical/false shim_dead/warning/false restart/critical/false shim_dead/warning/false give_up/critical/false"; got != want {
		t.Fatalf("inbox = %q, want %q", got, want)
	}
}

// The daemon's fault-to-recovered time, from the fault to the inbox line
// that says the shim answers again; logged, not asserted.
func TestDaemonRecoversAndReportsTheTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		want string
	}{
		{"dead", syscall.SIGKILL, "shim_dead/warning/false restart/info/true"},
		{"hung", syscall.SIGSTOP, "shim_hung/warning/false restart/info/true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newShimEnv(t)
			w := e.watchdog(e.start, 2, wideBudget)
			w.StatePath = ""
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, 200*time.Millisecond) }()

			fault := time.Now()
			e.signal(tc.sig)
			testutil.WaitFor(t, "the restart line", func() bool { return e.lines() == tc.want })
			t.Logf("%s: fault to recovered in %v (interval 200ms, probe timeout 300ms, hung after 2)", tc.name, time.Since(fault).Round(time.Millisecond))
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// A watchdog stopped mid-probe (SIGTERM to the daemon) has found nothing:
// the probe failed because of the stop, and a shim_dead line and a
// restart on the way out would be false.
func TestStoppedMidProbeFindsNothing(t *testing.T) {
	e := newShimEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := e.watchdog(e.start, 3, wideBudget).Once(ctx)
	if !errors.Is(err, context.Canceled) || res.Outcome != Healthy || res.Kind != "" {
		t.Errorf("Once(stopped) = %+v, %v; want no finding and context.Canceled", res, err)
	}
	if got := e.lines(); got != "" {
		t.Errorf("inbox = %q, want nothing", got)
	}
}

// Once the shim is gone, any local user may listen on its port: an answer
// there says nothing of the shim when its pid file names no live process.
// The shim is dead then, whatever answers; a pid file not believed is no
// finding of its own (the answer decides, and the restart says what is
// wrong with the file).
func TestPidFileOfNoLiveProcessIsDead(t *testing.T) {
	impostor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer impostor.Close()
	free := httptest.NewServer(nil)
	nothing := free.URL
	free.Close()
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pidFile := func(name string, pid int, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(strconv.Itoa(pid)+"\n"), mode)
		os.Chmod(p, mode)
		return p
	}
	for _, tc := range []struct {
		name, url, pidFile string
		want               string // the finding's kind
		detail             string // what its detail says
	}{
		{"live, answering", impostor.URL, pidFile("live.pid", live.Process.Pid, 0o644), "", ""},
		{"gone, another answering its port", impostor.URL, pidFile("dead.pid", dead.Process.Pid, 0o644), KindShimDead, "another process may hold its port"},
		{"no pid file, another answering its port", impostor.URL, filepath.Join(dir, "none.pid"), KindShimDead, "another process may hold its port"},
		{"gone, nothing listening", nothing, pidFile("dead-quiet.pid", dead.Process.Pid, 0o644), KindShimDead, "connection refused"},
		{"a pid file not believed, answering", impostor.URL, pidFile("open.pid", dead.Process.Pid, 0o666), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &PlainProcess{
				Health:  NewHTTPProbe(tc.url, time.Second, KindShimDead, KindShimHung, nil),
				Restart: CommandRestart{Command: "true", PidFile: tc.pidFile, Timeout: 5 * time.Second},
			}
			f := p.Probe(context.Background())
			if f.Kind != tc.want || !strings.Contains(f.Detail, tc.detail) || tc.want != "" && !strings.Contains(f.Detail, tc.pidFile) {
				t.Errorf("Probe = %+v; want kind %q, its detail naming the pid file and saying %q", f, tc.want, tc.detail)
			}
		})
	}
}

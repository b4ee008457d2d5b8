package watchdogs

import (
	"context"
	"errors"
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

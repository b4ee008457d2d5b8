package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// TestPodWatchdog: under a unit's WatchdogSec= (WATCHDOG_USEC) the pod
// pings systemd while every service is healthy, not while one is
// unhealthy (a pod that cannot get healthy is restarted by its unit), and
// again once it has recovered.
func TestPodWatchdog(t *testing.T) {
	e := newPodEnv(t)
	// No WATCHDOG_PID: the test cannot know airlock up's pid before it
	// starts it, and without one the watchdog is the process's own.
	pod := startPod(t, e, "watchdog", e.manifest("watchdog", "", e.pyService("alpha", 8001, "egress_none", "")), "WATCHDOG_USEC=400000")
	pod.awaitReady()
	forever := time.Now().Add(time.Hour)
	since := time.Now()
	waitFor(t, 30*time.Second, func() bool { return pod.pingsBetween(since, forever) > 0 }, "a watchdog ping while every service is healthy")

	n := pod.eventCount()
	syscall.Kill(commandPid(t, pod.service("alpha")), syscall.SIGSTOP)
	unhealthy, i := pod.awaitEvent("health", "alpha", n)
	if !strings.Contains(unhealthy.Detail, "unhealthy") {
		t.Fatalf("health event %+v, want unhealthy", unhealthy)
	}
	// The hung instance is killed at the end of its grace period (3s),
	// then restarted: all that while the pod is not healthy. A ping sent
	// just as the state changed may arrive after the event: the window
	// starts one ping period (200ms) later.
	restart, _ := pod.awaitEvent("restart", "alpha", i)
	if got := pod.pingsBetween(unhealthy.TS.Add(200*time.Millisecond), restart.TS); got != 0 {
		t.Errorf("%d watchdog pings between the unhealthy event (%v) and the restart (%v), want none", got, unhealthy.TS, restart.TS)
	}

	pod.awaitState("alpha", "healthy")
	since = time.Now()
	waitFor(t, 30*time.Second, func() bool { return pod.pingsBetween(since, forever) > 0 }, "a watchdog ping once the service recovered")
	pod.stop(10 * time.Second)
}

// TestPodReportsAnOOMKillWhileRunning: a child of a service that allocates
// past the service's memory_max is killed by the OOM killer while the
// service keeps running; that is a critical oom_kill event then, and not
// once more when the service stops.
func TestPodReportsAnOOMKillWhileRunning(t *testing.T) {
	e := newPodEnv(t)
	script := filepath.Join(e.dir, "oomchild.py")
	os.WriteFile(script, []byte(`import subprocess, sys, time
r = subprocess.run([sys.executable, "-c", "b = b'x' * (512 << 20)"])
print("child exited", r.returncode, flush=True)
time.sleep(3600)
`), 0o644)
	m := e.manifest("oomchild", "", fmt.Sprintf(`  - name: hog
    command: [%s, %s]
    user: "61000"
    preset: egress_none
    memory_max: 64M
    landlock: {ro: [%s]}
`, e.python, script, script))
	pod := startPod(t, e, "oomchild", m)
	pod.awaitReady()
	before := pod.service("hog")
	ev, _ := pod.awaitEvent("oom_kill", "hog", 0)
	if ev.Severity != events.Critical || !strings.Contains(ev.Detail, "OOM killer killed 1 process") {
		t.Errorf("oom_kill event %+v", ev)
	}
	if after := pod.service("hog"); after.State != "healthy" || after.Pid != before.Pid || after.Restarts != 0 {
		t.Errorf("the service after its child's OOM kill: %+v, want it still running (before: %+v)", after, before)
	}
	pod.stop(10 * time.Second)
	evs, _ := events.Read(pod.events, time.Time{})
	var ooms []events.Event
	for _, ev := range evs {
		if ev.Kind == "oom_kill" {
			ooms = append(ooms, ev)
		}
	}
	if len(ooms) != 1 {
		t.Errorf("%d oom_kill events, want the one: %+v", len(ooms), ooms)
	}
}

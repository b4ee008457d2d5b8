package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"
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

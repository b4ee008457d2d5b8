package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/watchdogs"
)

// The shim watchdog's recovery for an airlock pod: a restart through the
// supervisor's admin socket replaces a SIGSTOPped service (the supervisor
// kills the stopped instance itself), and a service the pod does not have
// is an error naming it. The service has no health check, so the
// supervisor alone would never notice the stop.
func TestShimWatchdogRestartsAStoppedPodServiceThroughTheAdminSocket(t *testing.T) {
	e := newPodEnv(t)
	svc := fmt.Sprintf(`  - name: shim
    command: [%s, %s, "8001", shim]
    user: "61000"
    preset: egress_none
    ports: [8001]
    landlock: {ro: [%s]}
    restart: {policy: always, backoff: {initial: 50ms, max: 1s}}
`, e.python, e.script, e.script)
	pod := startPod(t, e, "wdshim", e.manifest("wdshim", "", svc))
	pod.awaitReady()
	before := pod.awaitState("shim", "healthy")
	stopped := commandPid(t, before)
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	n := pod.eventCount()

	r := watchdogs.PodTarget{Socket: pod.socket, Service: "shim", Timeout: 10 * time.Second}
	if err := r.Recover(context.Background(), watchdogs.Finding{Kind: watchdogs.KindShimHung}); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	pod.awaitEvent("restart_requested", "shim", n)
	var after int
	waitFor(t, 60*time.Second, func() bool {
		st := pod.service("shim")
		if st.State != "healthy" || st.Pid == before.Pid {
			return false
		}
		after = commandPid(t, st)
		return true
	}, "a new shim instance")
	if after == stopped || syscall.Kill(stopped, 0) == nil {
		t.Errorf("the stopped shim %d is still there (new %d)", stopped, after)
	}

	r.Service = "nosuch"
	if err := r.Recover(context.Background(), watchdogs.Finding{Kind: watchdogs.KindShimDead}); err == nil || !strings.Contains(err.Error(), `no service "nosuch"`) {
		t.Errorf("Recover of a service the pod lacks = %v, want an error naming it", err)
	}
}

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The host watchdogs against an airlock pod: the evidence is the
// supervisor's status, the restarts (with a larger heap or memory limit)
// are the supervisor's, the probes reach the pod's own loopback through its
// admin socket, and every line lands in the pod's own agent-inbox.jsonl.

// gatewayService is a Node gateway (watchdogs/testdata/gateway.js) block.
func (e *podEnv) gatewayService(t *testing.T, name string, port int, more string, args ...string) string {
	t.Helper()
	node := realpath(t, testutil.RequireTool(t, "node"))
	script := filepath.Join(e.dir, "gateway.js")
	raw, err := os.ReadFile("../watchdogs/testdata/gateway.js")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(script, raw, 0o644)
	extra := ""
	for _, a := range args {
		extra += fmt.Sprintf(", %q", a)
	}
	return fmt.Sprintf(`  - name: %s
    command: [%s, %s, "%d"%s]
    user: "61000"
    preset: egress_none
    ports: [%d]
    landlock: {ro: [%s, %s]}
    health: {http: {port: %d, path: /healthz}, interval: 1s, timeout: 1s, threshold: 2}
%s`, name, node, script, port, extra, port, script, e.signals, port, more)
}

// podWatchdog runs `airlock watchdog NAME --once` against the pod, into
// its inbox, with a state file per watchdog.
func (p *runningPod) watchdog(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	state := filepath.Join(p.state, "watchdog-"+name+".json")
	argv := append([]string{"watchdog", name, "--once", "--state", state, "--admin-socket", p.socket, "--inbox", p.events, "--settle", "20s"}, args...)
	out, errs, code := runAirlock(t, argv...)
	t.Logf("airlock watchdog %s: exit %d\n%s", name, code, errs)
	if code != 0 {
		// A failed round says what it was on stderr ("gateway gave up:").
		return code, errs
	}
	return code, strings.TrimSpace(out)
}

// watchdogLines are the pod inbox's lines from source, as
// "kind/severity/recovered" words.
func (p *runningPod) watchdogLines(source string) string {
	evs, _ := events.Read(p.events, time.Time{})
	var w []string
	for _, e := range evs {
		if e.Source == source {
			w = append(w, fmt.Sprintf("%s/%s/%v", e.Kind, e.Severity, e.Recovered))
		}
	}
	return strings.Join(w, " ")
}

// get sends GET path to a port on the pod's loopback, through its admin
// socket; the gateway's /leak and /hog never answer (it dies of them).
func (p *runningPod) get(port int, path string) {
	c := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return adminclient.Dial(ctx, p.socket, addr)
		}}}
	if resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path)); err == nil {
		resp.Body.Close()
	}
}

func TestGatewayWatchdogPodHeapOOM(t *testing.T) {
	e := newPodEnv(t)
	gw := e.gatewayService(t, "gateway", 8002, `    env: {NODE_OPTIONS: "--max-old-space-size=32 --no-deprecation"}
    restart: {policy: always, backoff: {initial: 50ms, max: 1s}}
`)
	pod := startPod(t, e, "wdheap", e.manifest("wdheap", "", gw))
	pod.awaitReady()
	args := []string{"--heap-mb", "32", "--max-heap-mb", "128", "--url", "http://127.0.0.1:8002/healthz"}
	if code, out := pod.watchdog(t, "gateway", args...); code != 0 || out != "gateway healthy" {
		t.Fatalf("a first round = %d %q, want healthy", code, out)
	}
	before := pod.service("gateway")
	pod.get(8002, "/leak")
	// The supervisor restarts it as it was: with the heap that ran out.
	waitFor(t, 60*time.Second, func() bool { s := pod.service("gateway"); return s.Exits > before.Exits && s.State == "healthy" }, "the supervisor's own restart")
	if code, out := pod.watchdog(t, "gateway", args...); code != 0 || out != "gateway recovered" {
		t.Fatalf("the round after the heap OOM = %d %q, want recovered", code, out)
	}
	st := pod.awaitState("gateway", "healthy")
	if st.NodeHeapMB != 64 {
		t.Errorf("status node_heap_mb = %d, want 64", st.NodeHeapMB)
	}
	if got := testutil.Environ(t, commandPid(t, st), "NODE_OPTIONS"); got != "--no-deprecation --max-old-space-size=64" {
		t.Errorf("the new gateway's NODE_OPTIONS = %q, want the next heap step and the rest kept", got)
	}
	if got, want := pod.watchdogLines("watchdog-gateway"), "gateway_heap_oom/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
	if code, out := pod.watchdog(t, "gateway", args...); code != 0 || out != "gateway healthy" {
		t.Errorf("a round after the recovery = %d %q, want healthy (its own restart is no fault)", code, out)
	}
}

func TestGatewayWatchdogPodOOMKill(t *testing.T) {
	e := newPodEnv(t)
	gw := e.gatewayService(t, "gateway", 8002, `    memory_max: 96M
    restart: {policy: always, backoff: {initial: 50ms, max: 1s}}
`)
	pod := startPod(t, e, "wdoom", e.manifest("wdoom", "", gw))
	pod.awaitReady()
	args := []string{"--max-memory", "256M"}
	if code, out := pod.watchdog(t, "gateway", args...); code != 0 || out != "gateway healthy" {
		t.Fatalf("a first round = %d %q, want healthy", code, out)
	}
	before := pod.service("gateway")
	pod.get(8002, "/hog")
	waitFor(t, 60*time.Second, func() bool { s := pod.service("gateway"); return s.Exits > before.Exits && s.State == "healthy" }, "the supervisor's own restart")
	if s := pod.service("gateway"); s.OOMKills < 1 {
		t.Fatalf("status oom_kills = %d after the hog: the OOM killer did not kill it", s.OOMKills)
	}
	if code, out := pod.watchdog(t, "gateway", args...); code != 0 || out != "gateway recovered" {
		t.Fatalf("the round after the OOM kill = %d %q, want recovered", code, out)
	}
	if st := pod.awaitState("gateway", "healthy"); st.MemoryMax != 192<<20 {
		t.Errorf("status memory_max = %d, want %d", st.MemoryMax, 192<<20)
	}
	if got, want := pod.watchdogLines("watchdog-gateway"), "gateway_oom_kill/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// A shim the supervisor does not bring back (restart policy never) killed
// with SIGKILL; then one SIGSTOPped, hung after three one-shot rounds. The
// probe reaches the shim's port on the pod's loopback.
func TestShimWatchdogPodKilledAndHung(t *testing.T) {
	e := newPodEnv(t)
	svc := fmt.Sprintf(`  - name: shim
    command: [%s, %s, "8001", shim]
    user: "61000"
    preset: egress_none
    ports: [8001]
    landlock: {ro: [%s]}
    restart: {policy: never}
`, e.python, e.script, e.script)
	// A second service: a pod whose every service has ended has failed.
	pod := startPod(t, e, "wdshim", e.manifest("wdshim", "", svc+e.pyService("alpha", 8002, "egress_none", "")))
	pod.awaitReady()
	args := []string{"--url", "http://127.0.0.1:8001/healthz", "--probe-timeout", "1s"}
	killed := commandPid(t, pod.awaitState("shim", "healthy"))
	syscall.Kill(killed, syscall.SIGKILL)
	pod.awaitState("shim", "exited")
	if code, out := pod.watchdog(t, "shim", args...); code != 0 || out != "shim recovered" {
		t.Fatalf("the round after the kill = %d %q, want recovered", code, out)
	}
	stopped := commandPid(t, pod.awaitState("shim", "healthy"))
	syscall.Kill(stopped, syscall.SIGSTOP)
	for _, want := range []string{"shim suspect", "shim suspect", "shim recovered"} {
		if code, out := pod.watchdog(t, "shim", args...); code != 0 || out != want {
			t.Fatalf("a round after the stop = %d %q, want %q", code, out, want)
		}
	}
	if after := commandPid(t, pod.awaitState("shim", "healthy")); after == stopped || syscall.Kill(stopped, 0) == nil {
		t.Errorf("the stopped shim %d is still there (new %d)", stopped, after)
	}
	if got, want := pod.watchdogLines("watchdog-shim"), "shim_dead/warning/false restart/info/true shim_hung/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
	// A port no service of the pod declares: the pod refuses to dial it,
	// so the watchdog cannot look, and restarts nothing (a blind round,
	// exit 1), saying why.
	if code, _ := pod.watchdog(t, "shim", "--service", "nosuch", "--url", "http://127.0.0.1:8009/healthz"); code != 1 {
		t.Errorf("a watchdog of a port the pod lacks = %d, want 1", code)
	}
	if evs, _ := events.Read(pod.events, time.Time{}); evs[len(evs)-1].Kind != "unobservable" || !strings.Contains(evs[len(evs)-1].Detail, "the pod refuses to dial it") {
		t.Errorf("the last line %+v; want unobservable, the pod's refusal named", evs[len(evs)-1])
	}
}

// A gateway that exits at each start is restarted within the budget, then
// given up on with one critical line. A second service keeps the pod up.
func TestGatewayWatchdogPodCrashLoopIsGivenUp(t *testing.T) {
	e := newPodEnv(t)
	crash := filepath.Join(e.signals, "crash")
	gw := e.gatewayService(t, "gateway", 8002, "    restart: {policy: never}\n", "--crash-if", crash)
	pod := startPod(t, e, "wdloop", e.manifest("wdloop", "", e.pyService("shim", 8001, "egress_none", "")+gw))
	pod.awaitReady()
	os.WriteFile(crash, nil, 0o644)
	syscall.Kill(commandPid(t, pod.service("gateway")), syscall.SIGKILL)
	pod.awaitState("gateway", "exited")
	args := []string{"--max-restarts", "2", "--settle", "2s"}
	for i, want := range []string{"gateway failed", "gateway failed", "gateway gave up", "gateway gave up"} {
		if code, said := pod.watchdog(t, "gateway", args...); code != 1 || !strings.Contains(said, want+":") {
			t.Fatalf("round %d = %d %q, want 1 and %q", i, code, said, want)
		}
	}
	const want = "gateway_crash/warning/false restart/critical/false gateway_crash/warning/false restart/critical/false gateway_crash/warning/false give_up/critical/false"
	if got := pod.watchdogLines("watchdog-gateway"); got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// runAirlock runs the airlock binary and returns its stdout, stderr and
// exit code.
func runAirlock(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errs bytes.Buffer
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errs.String(), cmd.ProcessState.ExitCode()
}

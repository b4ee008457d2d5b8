package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/supervisor"
)

// shService is a service block running script under /bin/sh, with no
// health check (healthy once running) and restart as given.
func shService(name, script, restart, more string) string {
	return fmt.Sprintf(`  - name: %s
    command: [/bin/sh, -c, %q]
    user: "61000"
    preset: egress_none
    restart: %s
%s`, name, script, restart, more)
}

// gated is script run once the test opens the gate (openGate): a service
// that fails after the pod is ready, not during its boot (which would fail
// the boot).
// Its service is given e.seesSignals.
func gated(e *podEnv, script string) string {
	return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; %s", filepath.Join(e.signals, "gate"), script)
}

// seesSignals is a service's landlock block that shows it e.signals.
func (e *podEnv) seesSignals() string {
	return fmt.Sprintf("    landlock: {ro: [%s]}\n", e.signals)
}

func openGate(t *testing.T, e *podEnv) {
	if err := os.WriteFile(filepath.Join(e.signals, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// slowRestart restarts a service only after 60s: long enough for a test
// to read the evidence of its exit.
const slowRestart = "{policy: always, backoff: {initial: 60s, max: 60s}}"

// TestPodAdminStatusEvidence: the status says what a watchdog polling now
// and then needs to tell how the last instance died: how many exited, its
// exit, its last output (bounded whatever it wrote) and its OOM kills.
func TestPodAdminStatusEvidence(t *testing.T) {
	e := newPodEnv(t)
	hog := fmt.Sprintf("%s -c \"b = b'x' * (512 << 20)\"", e.python)
	flood := fmt.Sprintf(`%s -c "import sys
for i in range(100000): print('line', i)
sys.stdout.write('x' * (1 << 20))"`, e.python)
	m := e.manifest("evidence", "", e.pyService("steady", 8001, "egress_none", "")+
		shService("crasher", gated(e, "echo about to fail; exit 3"), slowRestart, e.seesSignals())+
		shService("hog", gated(e, "exec "+hog), slowRestart, "    memory_max: 64M\n"+e.seesSignals())+
		shService("flood", gated(e, flood), slowRestart, e.seesSignals()))
	pod := startPod(t, e, "evidence", m)
	pod.awaitReady()
	openGate(t, e)
	for _, name := range []string{"crasher", "hog", "flood"} {
		pod.awaitState(name, "backoff")
	}
	st := pod.status()
	if st.Booted.IsZero() || st.Booted.After(time.Now()) {
		t.Errorf("booted %v", st.Booted)
	}
	for _, s := range st.Services {
		switch s.Name {
		case "steady":
			if s.Exits != 0 || s.LastOutput != nil || s.OOMKills != 0 {
				t.Errorf("steady, which never exited: %+v", s)
			}
		case "crasher":
			if s.Exits < 1 || s.LastExit == nil || *s.LastExit != 3 || strings.Join(s.LastOutput, "\n") != "about to fail" || s.OOMKills != 0 {
				t.Errorf("crasher: exits %d, last exit %d, last output %q, oom kills %d; want 1+, 3, its line, 0", s.Exits, lastExit(s), s.LastOutput, s.OOMKills)
			}
		case "hog":
			if s.Exits < 1 || s.LastExit == nil || *s.LastExit != 137 || s.OOMKills < 1 || s.MemoryMax != 64<<20 {
				t.Errorf("hog: exits %d, last exit %d, oom kills %d, memory max %d; want 1+, 137, 1+, 64 MiB", s.Exits, lastExit(s), s.OOMKills, s.MemoryMax)
			}
		case "flood":
			// The megabyte without a newline is passed on in pieces
			// (64 KiB at least), each kept cut at 2 KiB.
			n, longest, numbered := len(s.LastOutput), 0, false
			for _, line := range s.LastOutput {
				longest = max(longest, len(line))
				numbered = numbered || line == "line 99999"
			}
			if n != 40 || !numbered || longest != 2048 || len(s.LastOutput[n-1]) != 2048 {
				t.Errorf("flood: %d lines kept, the longest %d bytes, line 99999 among them: %v; want 40, 2048, true", n, longest, numbered)
			}
		}
	}
	pod.stop(15 * time.Second)
}

// lastExit is the service's last exit code, -1 when it has none.
func lastExit(s supervisor.ServiceStatus) int {
	if s.LastExit == nil {
		return -1
	}
	return *s.LastExit
}

// TestPodAdminRestartWithAChange: an operator's (a watchdog's) restart may
// raise a Node service's heap limit in its NODE_OPTIONS and its memory
// limit, for this launch and the later ones; a body that is not exactly
// that is refused, naming the field.
func TestPodAdminRestartWithAChange(t *testing.T) {
	e := newPodEnv(t)
	m := e.manifest("change", "", e.pyService("alpha", 8001, "egress_none", `    memory_max: 64M
    env: {NODE_OPTIONS: "--enable-source-maps --max-old-space-size 64 --trace-warnings"}
`))
	pod := startPod(t, e, "change", m)
	pod.awaitReady()
	if s := pod.service("alpha"); s.NodeHeapMB != 64 || s.MemoryMax != 64<<20 {
		t.Errorf("before: node_heap_mb %d, memory_max %d; want the manifest's 64 and 64 MiB", s.NodeHeapMB, s.MemoryMax)
	}
	ctx := context.Background()
	restart := func(o adminclient.RestartOptions, want string) supervisor.ServiceStatus {
		t.Helper()
		before, n := pod.service("alpha"), pod.eventCount()
		if err := adminclient.Restart(ctx, pod.socket, "alpha", o); err != nil {
			t.Fatalf("restart %+v: %v", o, err)
		}
		ev, _ := pod.awaitEvent("restart_requested", "alpha", n)
		if !strings.Contains(ev.Detail, want) {
			t.Errorf("restart_requested %q, want it to say %q", ev.Detail, want)
		}
		var s supervisor.ServiceStatus
		waitFor(t, 30*time.Second, func() bool {
			s = pod.service("alpha")
			return s.Restarts == before.Restarts+1 && s.State == "healthy"
		}, "alpha restarted")
		return s
	}
	nodeOptions := func(s supervisor.ServiceStatus) string {
		return testutil.Environ(t, commandPid(t, s), "NODE_OPTIONS")
	}
	const wantOpts = "--enable-source-maps --trace-warnings --max-old-space-size=128"

	s := restart(adminclient.RestartOptions{NodeHeapMB: 128}, "heap 64 → 128 MB")
	if got := nodeOptions(s); got != wantOpts {
		t.Errorf("NODE_OPTIONS %q, want %q", got, wantOpts)
	}
	if s.NodeHeapMB != 128 {
		t.Errorf("status node_heap_mb %d, want 128", s.NodeHeapMB)
	}

	s = restart(adminclient.RestartOptions{MemoryMax: 128 << 20}, "memory limit 64 MiB → 128 MiB")
	if got := memoryLimit(t, commandPid(t, s)); got != 128<<20 {
		t.Errorf("the new instance's memory limit %d, want 128 MiB", got)
	}
	if s.MemoryMax != 128<<20 || s.NodeHeapMB != 128 {
		t.Errorf("status memory_max %d, node_heap_mb %d; want 128 MiB and the heap change kept, 128", s.MemoryMax, s.NodeHeapMB)
	}
	if got := nodeOptions(s); got != wantOpts {
		t.Errorf("NODE_OPTIONS after the next restart %q, want the change kept: %q", got, wantOpts)
	}

	for _, c := range []struct{ body, field string }{
		{`{"heap": 128}`, `unknown field \"heap\"`},
		{`{"node_heap_mb": 0}`, "node_heap_mb"},
		{`{"node_heap_mb": 65537}`, "node_heap_mb"},
		{`{"node_heap_mb": "128"}`, "node_heap_mb"},
		{`{"memory_max": -1}`, "memory_max"},
		{`{"memory_max": 1.5}`, "memory_max"},
		{`{"memory_max": 1} {}`, "one JSON object"},
	} {
		code, body := adminPost(t, pod.socket, adminclient.RestartPath("alpha"), c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, c.field) {
			t.Errorf("restart with %s: %d %s, want 400 naming %s", c.body, code, body, c.field)
		}
	}
	if s := pod.service("alpha"); s.Restarts != 2 {
		t.Errorf("%d restarts, want the 2 good ones only", s.Restarts)
	}
}

// adminPost posts body to the pod's admin API as it is.
func adminPost(t *testing.T, socket, path, body string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	resp, err := client.Post("http://pod"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// memoryLimit is the memory limit of pid's cgroups: its v1 memory group's
// when it has one (a hybrid hierarchy), else its v2 group's.
func memoryLimit(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			files = append([]string{filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")}, files...)
		case parts[0] == "0":
			mnt, err := cgroup2.Mount()
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, filepath.Join(mnt, parts[2], "memory.max"))
		}
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && n < 1<<62 {
			return n
		}
	}
	t.Fatalf("pid %d has no memory limit in %q", pid, files)
	return 0
}

// TestPodAdminRevive: a service exited for good (restart policy never) or
// given up on (a crash loop) is not forgotten: an operator's restart
// starts it again. The service runs for good once the test has made the
// file revive.
func TestPodAdminRevive(t *testing.T) {
	e := newPodEnv(t)
	revive := filepath.Join(e.signals, "revive")
	m := e.manifest("revive", "", e.pyService("steady", 8001, "egress_none", "")+
		shService("once", "[ -e "+revive+" ] && exec sleep 3600; "+gated(e, "echo done; exit 0"), "{policy: never}", e.seesSignals())+
		shService("crasher", "[ -e "+revive+" ] && exec sleep 3600; "+gated(e, "exit 3"),
			"{policy: always, backoff: {initial: 20ms, max: 100ms}, give_up: {restarts: 2, window: 60s}}", e.seesSignals()))
	pod := startPod(t, e, "revive", m)
	pod.awaitReady()
	openGate(t, e)
	pod.awaitState("once", "exited")
	pod.awaitState("crasher", "given_up")
	if err := os.WriteFile(revive, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"once", "crasher"} {
		n := pod.eventCount()
		if err := adminclient.Restart(context.Background(), pod.socket, name, adminclient.RestartOptions{}); err != nil {
			t.Fatalf("restart %s: %v", name, err)
		}
		ev, _ := pod.awaitEvent("restart_requested", name, n)
		if !strings.Contains(ev.Detail, "revived") {
			t.Errorf("restart_requested %q, want it to say the service was revived", ev.Detail)
		}
		pod.awaitState(name, "healthy")
	}
	if st := pod.status(); !st.Ready {
		t.Errorf("the pod is not ready with every service revived: %+v", st)
	}
	pod.stop(15 * time.Second)
}

// TestPodAdminFailsWhenEveryServiceEnded: services parked (exited for good,
// given up on) still fail the pod when none is left running: pod_failed,
// and `airlock up` exits non-zero for its unit to restart it.
func TestPodAdminFailsWhenEveryServiceEnded(t *testing.T) {
	e := newPodEnv(t)
	m := e.manifest("ended", "", shService("once", gated(e, "exit 0"), "{policy: never}", e.seesSignals())+
		shService("crasher", gated(e, "exit 3"), "{policy: always, backoff: {initial: 20ms, max: 100ms}, give_up: {restarts: 1, window: 60s}}", e.seesSignals()))
	pod := startPod(t, e, "ended", m)
	pod.awaitReady()
	openGate(t, e)
	select {
	case <-pod.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock up still runs with every service ended:\n%s", pod.stderr.String())
	}
	if code := exitCode(pod.exitErr); code != 1 {
		t.Errorf("airlock up exited %d, want 1", code)
	}
	ev, _ := pod.awaitEvent("pod_failed", "", 0)
	if !strings.Contains(ev.Detail, "once exited") || !strings.Contains(ev.Detail, "crasher given_up") {
		t.Errorf("pod_failed %q, want both services named", ev.Detail)
	}
}

// TestPodBootFailureKeepsItsCause: a service that ends during the boot
// fails it, and the inbox says why in the order it happened: the
// service's exited event, then boot_failed naming it.
func TestPodBootFailureKeepsItsCause(t *testing.T) {
	e := newPodEnv(t)
	m := e.manifest("bootfail", "", shService("once", "exit 3", "{policy: never}",
		"    ports: [8009]\n    health: {http: {port: 8009, path: /healthz}, interval: 1s, timeout: 1s, threshold: 2}\n"))
	pod := startPod(t, e, "bootfail", m)
	select {
	case <-pod.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock up still runs with its only service exited during the boot:\n%s", pod.stderr.String())
	}
	if exitCode(pod.exitErr) == 0 {
		t.Errorf("airlock up exited 0 after a failed boot")
	}
	evs, err := events.Read(pod.events, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	exited, failed := -1, -1
	for i, ev := range evs {
		switch {
		case ev.Kind == "exited" && ev.Service == "once":
			exited = i
		case ev.Kind == "boot_failed":
			failed = i
			if !strings.Contains(ev.Detail, "once") {
				t.Errorf("boot_failed %q does not name the service", ev.Detail)
			}
		}
	}
	if exited < 0 || failed < 0 || exited > failed {
		t.Errorf("the service's exited event at %d, boot_failed at %d: want both, in that order", exited, failed)
	}
}

// TestPodAdminDial: through the admin socket a host process reaches a
// service's port on the pod's own loopback: an HTTP GET gets the
// service's answer, a half-close reaches the service; a port no service
// declares is refused (403), and a declared port nothing listens on is
// ECONNREFUSED, as on the host.
func TestPodAdminDial(t *testing.T) {
	e := newPodEnv(t)
	// echo answers, once the client has finished sending, how many bytes
	// it got: without the half-close passed on it would wait for ever.
	echo := filepath.Join(e.dir, "echo.py")
	os.WriteFile(echo, []byte(`import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8002))
s.listen()
while True:
    c, _ = s.accept()
    n = 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        n += len(b)
    c.sendall(b"got %d bytes\n" % n)
    c.close()
`), 0o644)
	m := e.manifest("dial", "", e.pyService("alpha", 8001, "egress_none", "")+fmt.Sprintf(`  - name: echo
    command: [%s, %s]
    user: "61000"
    preset: egress_none
    ports: [8002, 8009]
    landlock: {ro: [%s]}
    health: {tcp: {port: 8002}, interval: 1s}
`, e.python, echo, echo))
	pod := startPod(t, e, "dial", m)
	pod.awaitReady()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return adminclient.Dial(ctx, pod.socket, "127.0.0.1:8001")
	}}}
	resp, err := client.Get("http://alpha.test/whoami")
	if err != nil {
		t.Fatalf("GET /whoami through the admin socket: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if a := answer(t, string(body)); resp.StatusCode != 200 || a["name"] != "alpha" {
		t.Errorf("GET /whoami: %d %s, want alpha's answer", resp.StatusCode, body)
	}

	conn, err := adminclient.Dial(ctx, pod.socket, "127.0.0.1:8002")
	if err != nil {
		t.Fatalf("dial echo: %v", err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, strings.Repeat("x", 100000))
	conn.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || string(got) != "got 100000 bytes\n" {
		t.Errorf("echo after a half-close: %q, %v; want it to have got 100000 bytes", got, err)
	}

	for _, c := range []struct {
		addr, rule string
	}{
		{"127.0.0.1:3128", "dial_service_ports_only"}, // the pod's proxy
		{"192.0.2.1:8001", "dial_loopback_only"},
	} {
		var se *adminclient.StatusError
		_, err := adminclient.Dial(ctx, pod.socket, c.addr)
		if !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("dial %s: %v, want a 403 naming %s", c.addr, err, c.rule)
		}
	}
	_, err = adminclient.Dial(ctx, pod.socket, "[::1]:8009")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial a declared port nothing listens on: %v, want ECONNREFUSED", err)
	}
	pod.stop(15 * time.Second)
}

// A second stop signal kills at once what is still running, a service the
// supervisor is stopping to restart it included: one that ignores SIGTERM
// held the pod's stop, the second signal too, for a whole stop_grace of
// its own (here a minute).
func TestPodSecondSignalEndsARestartInFlight(t *testing.T) {
	e := newPodEnv(t)
	m := strings.Replace(e.manifest("stubborn", "", shService("stubborn", "trap '' TERM; while :; do sleep 0.1; done", "{policy: always}", "")),
		"stop_grace: 3s", "stop_grace: 60s", 1)
	if !strings.Contains(m, "stop_grace: 60s") {
		t.Fatalf("the manifest has no stop_grace of 60s to outlast:\n%s", m)
	}
	pod := startPod(t, e, "stubborn", m)
	pod.awaitReady()
	n := pod.eventCount()
	if err := adminclient.Restart(context.Background(), pod.socket, "stubborn", adminclient.RestartOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.awaitEvent("restart_requested", "stubborn", n)
	// The instance ignores the restart's SIGTERM: the supervisor waits
	// for it, up to stop_grace, when the operator stops the pod, twice.
	pod.cmd.Process.Signal(syscall.SIGTERM)
	pod.awaitEvent("stop", "", n)
	pod.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pod.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the pod still runs 20s after a second stop signal (stop_grace 60s)")
	}
	if pod.exitErr != nil {
		t.Errorf("airlock up after a second stop signal: %v", pod.exitErr)
	}
}

// `airlock up`, run as root on a manifest another user could change, says
// so: the pod does what the manifest says.
func TestPodWarnsOfAnUntrustedManifest(t *testing.T) {
	e := newPodEnv(t)
	m := e.manifest("untrusted", "", shService("once", "exit 3", "{policy: never}", ""))
	// startPod's write keeps the mode of the file it finds.
	path := filepath.Join(e.dir, "untrusted.yaml")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o664); err != nil {
		t.Fatal(err)
	}
	pod := startPod(t, e, "untrusted", m)
	select {
	case <-pod.exited: // its only service exits during the boot
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock up still runs:\n%s", pod.stderr.String())
	}
	if got := pod.stderr.String(); !strings.Contains(got, "the manifest could be changed by another user") || !strings.Contains(got, "mode 0664") {
		t.Errorf("airlock up on a group-writable manifest did not say so:\n%s", got)
	}
}

// A health check takes a redirect as the answer it is (3xx is healthy),
// never following it to whatever it points at (here, a port where nothing
// listens).
func TestPodHealthTakesARedirectAsItIs(t *testing.T) {
	e := newPodEnv(t)
	svc := strings.Replace(e.pyService("mover", 8031, "egress_none", ""), "path: /healthz", "path: /moved", 1)
	pod := startPod(t, e, "mover", e.manifest("mover", "", svc))
	pod.awaitReady()
}

// A pod whose admin socket another pod serves does not boot: it would
// take the socket over (the other pod left without its admin API, and an
// operator's restart landing on the wrong pod).
func TestPodRefusesAnotherPodsAdminSocket(t *testing.T) {
	e := newPodEnv(t)
	first := startPod(t, e, "first", e.manifest("first", "", e.pyService("one", 8041, "egress_none", "")))
	first.awaitReady()
	second := startPod(t, e, "second", e.manifest("second", "admin:\n  socket: "+first.socket+"\n", e.pyService("two", 8042, "egress_none", "")))
	select {
	case <-second.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the second pod still runs on the first's admin socket:\n%s", second.stderr.String())
	}
	if exitCode(second.exitErr) == 0 || !strings.Contains(second.stderr.String(), "another process listens on it") {
		t.Errorf("second pod: exit %d; want a refused boot naming the socket:\n%s", exitCode(second.exitErr), second.stderr.String())
	}
	first.awaitState("one", "healthy") // its admin API still answers, as itself
}

// A pod whose admin socket would be in a directory another user may write
// (/tmp, sticky or not) does not boot: that user could bind the path while
// the pod is down, refusing its next boot or taken by its clients for it.
func TestPodRefusesAnAdminSocketOthersCouldBind(t *testing.T) {
	e := newPodEnv(t)
	shared := fmt.Sprintf("/tmp/airlock-itest-%d.sock", os.Getpid()) // /tmp itself: TMPDIR may be private
	pod := startPod(t, e, "sharedsock", e.manifest("sharedsock", "admin:\n  socket: "+shared+"\n", e.pyService("one", 8043, "egress_none", "")))
	select {
	case <-pod.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the pod booted with its admin socket in /tmp:\n%s", pod.stderr.String())
	}
	if exitCode(pod.exitErr) == 0 || !strings.Contains(pod.stderr.String(), "admin socket "+shared+": its directory") {
		t.Errorf("exit %d; want a refused boot naming the socket's directory:\n%s", exitCode(pod.exitErr), pod.stderr.String())
	}
	if _, err := os.Lstat(shared); !os.IsNotExist(err) {
		os.Remove(shared)
		t.Errorf("the refused pod left %s (%v)", shared, err)
	}
}

// A service run with a host group's gid is said to be, on record: it reads
// what that group may.
func TestPodSaysAHostGroup(t *testing.T) {
	e := newPodEnv(t)
	group, err := user.LookupGroupId("65534")
	if err != nil {
		t.Fatalf("no host group 65534 to test with: %v", err)
	}
	svc := strings.Replace(e.pyService("grouped", 8051, "egress_none", ""), `user: "61000"`, `user: "61000:65534"`, 1)
	pod := startPod(t, e, "grouped", e.manifest("grouped", "", svc))
	pod.awaitReady()
	ev, _ := pod.awaitEvent("host_account", "grouped", 0)
	if ev.Severity != events.Warning || !strings.Contains(ev.Detail, fmt.Sprintf("gid 65534 is the host group %q", group.Name)) {
		t.Errorf("event %+v; want a warning naming the host group", ev)
	}
}

// A service starts when every service it comes after is healthy at once:
// one healthy earlier and crashed since, waiting out its backoff while
// another was awaited, is waited for again.
func TestPodDependenciesAllUpAtOnce(t *testing.T) {
	e := newPodEnv(t)
	slow := fmt.Sprintf("    ports: [8063]\n    landlock: {ro: [%s]}\n    health: {http: {port: 8063, path: /healthz}, interval: 300ms, timeout: 300ms, threshold: 30}\n", e.script)
	m := e.manifest("deps", "",
		shService("crasher", "sleep 1; exit 1", "{policy: always, backoff: {initial: 4s, max: 4s}, give_up: {restarts: 50, window: 60s}}", "")+
			shService("slow", fmt.Sprintf("sleep 2.5; exec %s %s 8063 slow", e.python, e.script), "{policy: always}", slow)+
			shService("dependent", "exec sleep 1000", "{policy: always}", "    after: [crasher, slow]\n"))
	pod := startPod(t, e, "deps", m)
	pod.awaitReady()
	_, crashed := pod.awaitEvent("exit", "crasher", 0)
	_, again := pod.awaitEvent("started", "crasher", crashed)
	_, started := pod.awaitEvent("started", "dependent", 0)
	evs, _ := events.Read(pod.events, time.Time{})
	if started < again {
		t.Errorf("dependent started (event %d) while crasher waited out its backoff (exit %d, started again %d):\n%+v", started, crashed, again, evs)
	}
	// Not started yet, it was told nothing of its dependencies' restarts
	// ("dependents are left running" is not said of it).
	for i, ev := range evs[:started] {
		if ev.Service == "dependent" && strings.HasPrefix(ev.Kind, "dependency_") {
			t.Errorf("event %d, before dependent started: %+v", i, ev)
		}
	}
}

// A second stop signal while a boot is being stopped kills what it
// started at once: the first gives each service its stop_grace (an hour
// here), which a service ignoring SIGTERM would use to the end.
func TestPodSecondSignalDuringBootKills(t *testing.T) {
	e := newPodEnv(t)
	m := strings.Replace(e.manifest("stubborn", "",
		shService("stubborn", "trap '' TERM; exec sleep 1000", "{policy: always}", "")+
			shService("unready", "exec sleep 1000", "{policy: always}", "    ports: [8071]\n    health: {tcp: {port: 8071}, interval: 1s, timeout: 1s, threshold: 100}\n")),
		"stop_grace: 3s", "stop_grace: 1h", 1)
	pod := startPod(t, e, "stubborn", m)
	pod.awaitEvent("started", "stubborn", 0)
	pod.awaitEvent("started", "unready", 0)
	pod.cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(time.Second) // the boot's stop under way
	pod.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-pod.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("airlock up still stopping 30s after a second SIGINT (stop_grace 1h):\n%s", pod.stderr.String())
	}
}

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/ingress"
)

// podEnv is what a pod test's manifest refers to: a bundle with two
// presets, an HTTPS upstream on 127.0.0.2, the service script, an
// operator key. Everything is under a directory the services' uid can
// traverse.
type podEnv struct {
	dir, bundle, python, script, keys, key string
	// signals holds the files a test makes for its services to notice
	// (gated, revive, crash): the only part of dir they see without its
	// files being theirs to read (the sandbox's /tmp is its own).
	signals    string
	upstreamCA string
	tlsPort    int
}

func newPodEnv(t *testing.T) *podEnv {
	testutil.RequireRoot(t, "airlock up (network namespace, cgroups, uid switch)")
	dir, err := os.MkdirTemp("", "airlock-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	e := &podEnv{dir: dir, bundle: filepath.Join(dir, "bundle"), signals: filepath.Join(dir, "signals")}
	if err := os.Mkdir(e.signals, 0o755); err != nil {
		t.Fatal(err)
	}
	// The system's python3: the services' uid can execute it.
	e.python = realpath(t, "/usr/bin/python3")
	e.script = filepath.Join(dir, "podsvc.py")
	raw, err := os.ReadFile("testdata/podsvc.py")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(e.script, raw, 0o644)

	ca, err := testca.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	e.upstreamCA = ca.File
	cfg, err := ca.ServerConfig("api.test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from api.test")
	}), TLSConfig: cfg}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	e.tlsPort = ln.Addr().(*net.TCPAddr).Port

	os.MkdirAll(e.bundle, 0o755)
	e.writePreset(t, "egress_ok", true)
	e.writePreset(t, "egress_none", false)

	e.keys = filepath.Join(dir, "operators.keys")
	if e.key, err = ingress.NewKey(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(e.keys, []byte("itest "+ingress.HashKey(e.key)+"\n"), 0o600)
	return e
}

// writePreset writes a preset that lets python3 GET api.test's /v1/**, or
// one with no rules.
func (e *podEnv) writePreset(t *testing.T, name string, allow bool) {
	rules := "[]"
	if allow {
		rules = fmt.Sprintf(`[{"name": "api", "binaries": [{"path": %q}], "hosts": ["api.test"], "ports": [%d], "methods": ["GET"], "paths": ["/v1/**"]}]`, e.python, e.tlsPort)
	}
	src := fmt.Sprintf("package airlock.presets.%s\n\nimport data.airlock.lib\n\nrules := %s\n\ndenies := []\n\ndecision := lib.decide(rules, denies)\n", name, rules)
	if err := os.WriteFile(filepath.Join(e.bundle, name+".rego"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// manifest is a pod of the given services with the test's proxy settings.
func (e *podEnv) manifest(name, extra, services string) string {
	return fmt.Sprintf(`name: %s
state_dir: %s
stop_grace: 3s
policy:
  bundle: %s
proxy:
  port: 3128
  ca_dir: %s
  upstream_ca: [%s]
  resolve: ["api.test:%d:127.0.0.2"]
  allow_range: ["127.0.0.2/32"]
%s
services:
%s`, name, filepath.Join(e.dir, "state-"+name), e.bundle, filepath.Join(e.dir, "ca"), e.upstreamCA, e.tlsPort, extra, services)
}

// pyService is a podsvc.py service block. Its health check allows a loaded
// machine's python a second: tighter, a slow answer is taken for a hang
// and the service restarted once more than a test counts.
func (e *podEnv) pyService(name string, port int, preset, more string) string {
	return fmt.Sprintf(`  - name: %s
    command: [%s, %s, "%d", %s]
    user: "61000"
    preset: %s
    ports: [%d]
    landlock: {ro: [%s]}
    health: {http: {port: %d, path: /healthz}, interval: 1s, timeout: 1s, threshold: 2}
    restart: {policy: always, backoff: {initial: 50ms, max: 1s}, give_up: {restarts: 5, window: 60s}}
%s`, name, e.python, e.script, port, name, preset, port, e.script, port, more)
}

// runningPod is an `airlock up` process.
type runningPod struct {
	t       *testing.T
	cmd     *exec.Cmd
	stderr  *testutil.Buffer
	notify  chan string // every message but the watchdog's pings
	pingMu  sync.Mutex
	pings   []time.Time // when each WATCHDOG=1 arrived
	socket  string
	events  string
	state   string
	exited  chan struct{}
	exitErr error
}

// startPod writes the manifest and runs `airlock up` on it with a
// NOTIFY_SOCKET the test reads, as systemd would, and env added.
func startPod(t *testing.T, e *podEnv, name, manifest string, env ...string) *runningPod {
	path := filepath.Join(e.dir, name+".yaml")
	os.WriteFile(path, []byte(manifest), 0o644)
	notifyPath := filepath.Join(e.dir, name+".notify")
	os.Remove(notifyPath) // a previous run of the same pod
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(e.dir, "state-"+name)
	p := &runningPod{t: t, stderr: &testutil.Buffer{}, notify: make(chan string, 64), exited: make(chan struct{}),
		socket: filepath.Join(state, "admin.sock"), events: filepath.Join(state, "agent-inbox.jsonl"), state: state}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := nc.Read(buf)
			if err != nil {
				close(p.notify)
				return
			}
			if msg := string(buf[:n]); msg == "WATCHDOG=1" {
				p.pingMu.Lock()
				p.pings = append(p.pings, time.Now())
				p.pingMu.Unlock()
			} else {
				p.notify <- msg
			}
		}
	}()
	p.cmd = exec.Command(airlockBin, "up", path)
	p.cmd.Env = cleanEnv(append([]string{"NOTIFY_SOCKET=" + notifyPath}, env...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exitErr = p.cmd.Wait(); nc.Close(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("airlock up output:\n%s", p.stderr.String())
		}
	})
	return p
}

// awaitReady waits for READY=1 on the notify socket.
func (p *runningPod) awaitReady() {
	p.t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case msg, ok := <-p.notify:
			if !ok {
				p.t.Fatalf("airlock up ended before READY=1 (%v):\n%s", p.exitErr, p.stderr.String())
			}
			if strings.Contains(msg, "READY=1") {
				return
			}
		case <-deadline:
			p.t.Fatalf("no READY=1 within 90s:\n%s", p.stderr.String())
		}
	}
}

// pingsBetween counts the watchdog's pings that arrived within (from, to).
func (p *runningPod) pingsBetween(from, to time.Time) int {
	p.pingMu.Lock()
	defer p.pingMu.Unlock()
	n := 0
	for _, at := range p.pings {
		if at.After(from) && at.Before(to) {
			n++
		}
	}
	return n
}

func (p *runningPod) status() supervisor.Status {
	p.t.Helper()
	out, err := exec.Command(airlockBin, "status", "--json", "--socket", p.socket).Output()
	if err != nil {
		p.t.Fatalf("airlock status: %v", err)
	}
	var st supervisor.Status
	if err := json.Unmarshal(out, &st); err != nil {
		p.t.Fatalf("airlock status --json: %v: %s", err, out)
	}
	return st
}

func (p *runningPod) service(name string) supervisor.ServiceStatus {
	for _, s := range p.status().Services {
		if s.Name == name {
			return s
		}
	}
	p.t.Fatalf("no service %s in the status", name)
	return supervisor.ServiceStatus{}
}

// awaitEvent waits for an event of kind about service (any service when
// empty) after the n first events, and returns it with its index.
func (p *runningPod) awaitEvent(kind, service string, after int) (events.Event, int) {
	p.t.Helper()
	var found events.Event
	idx := -1
	waitFor(p.t, 60*time.Second, func() bool {
		evs, _ := events.Read(p.events, time.Time{})
		for i := after; i < len(evs); i++ {
			if evs[i].Kind == kind && (service == "" || evs[i].Service == service) {
				found, idx = evs[i], i
				return true
			}
		}
		return false
	}, "event %s of %q", kind, service)
	return found, idx
}

func (p *runningPod) eventCount() int {
	evs, _ := events.Read(p.events, time.Time{})
	return len(evs)
}

// awaitState waits until service is in state.
func (p *runningPod) awaitState(service, state string) supervisor.ServiceStatus {
	p.t.Helper()
	var s supervisor.ServiceStatus
	waitFor(p.t, 60*time.Second, func() bool { s = p.service(service); return s.State == state }, "service %s %s", service, state)
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (p *runningPod) stop(within time.Duration) {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(within):
		p.t.Fatalf("airlock up did not stop within %v:\n%s", within, p.stderr.String())
	}
	if p.exitErr != nil {
		p.t.Fatalf("airlock up exited with %v:\n%s", p.exitErr, p.stderr.String())
	}
}

// call sends GET path to an ingress route with the key (none when empty).
func call(t *testing.T, addr, key, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// answer decodes a podsvc.py JSON answer.
func answer(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("service answer %q: %v", body, err)
	}
	return m
}

// commandPid is the pid of the service's command (its init's child).
func commandPid(t *testing.T, st supervisor.ServiceStatus) int {
	t.Helper()
	pid, err := testutil.SandboxCommand(st.Pid)
	if err != nil {
		t.Fatalf("service %s: %v", st.Name, err)
	}
	return pid
}

// podGroup is the pod's cgroup v2 directory.
func podGroup(t *testing.T, name string) string {
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(mnt, "airlock-pod-"+name)
}

func netnsOf(pid int) string {
	s, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	return s
}

// TestPod boots a real pod of two services and walks through what an
// operator relies on: boot order and READY, loopback between services,
// egress decided per service, ingress keys, restarts after a crash and a
// hang, an operator's restart, live policy edits, and a clean stop.
func TestPod(t *testing.T) {
	e := newPodEnv(t)
	alphaIn, betaIn, httpPort := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	m := e.manifest("itest", fmt.Sprintf(`admin:
  http: 127.0.0.1:%d
ingress:
  - {name: alpha, listen: "127.0.0.1:%d", service: alpha, port: 8001, keys: %s}
  - {name: beta, listen: "127.0.0.1:%d", service: beta, port: 8002, keys: %s}`, httpPort, alphaIn, e.keys, betaIn, e.keys),
		e.pyService("alpha", 8001, "egress_ok", "")+e.pyService("beta", 8002, "egress_none", "    after: [alpha]\n"))
	pod := startPod(t, e, "itest", m)
	pod.awaitReady()
	alpha, beta := fmt.Sprintf("127.0.0.1:%d", alphaIn), fmt.Sprintf("127.0.0.1:%d", betaIn)

	t.Run("boot order and readiness", func(t *testing.T) {
		evs, err := events.Read(pod.events, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var steps []string
		started, healthy := map[string]int{}, map[string]int{}
		ready, healthStep := -1, -1
		for i, ev := range evs {
			switch ev.Kind {
			case "boot_step":
				steps = append(steps, strings.Fields(ev.Detail)[0])
				if strings.HasPrefix(ev.Detail, "health ") {
					healthStep = i
				}
			case "started":
				started[ev.Service] = i
			case "health":
				if ev.Detail == "healthy" {
					healthy[ev.Service] = i
				}
			case "ready":
				ready = i
			}
		}
		want := "state policy proxy network cgroups serve ingress admin services health" // the lock is taken before the events file opens
		if strings.Join(steps, " ") != want {
			t.Errorf("boot steps %q, want %q", steps, want)
		}
		if started["alpha"] == 0 || started["beta"] < started["alpha"] || ready < started["beta"] {
			t.Errorf("alpha started at event %d, beta (after alpha) at %d, ready at %d", started["alpha"], started["beta"], ready)
		}
		// The health step ends, and READY says, that every service is
		// healthy: each one's healthy event is on record before both,
		// for whoever reads the inbox in order.
		for _, name := range []string{"alpha", "beta"} {
			if h, ok := healthy[name]; !ok || h > healthStep || h > ready {
				t.Errorf("%s's healthy event at %d (recorded: %v), the health step's at %d, ready at %d", name, h, ok, healthStep, ready)
			}
		}
		st := pod.status()
		if !st.Ready || len(st.Services) != 2 || st.Services[0].State != "healthy" || st.Services[1].State != "healthy" {
			t.Errorf("status %+v, want both services healthy and the pod ready", st)
		}
		code, body := call(t, fmt.Sprintf("127.0.0.1:%d", httpPort), "", "/readyz")
		if code != 200 || !strings.Contains(body, `"alpha":"healthy"`) || !strings.Contains(body, `"beta":"healthy"`) {
			t.Errorf("/readyz: %d %s", code, body)
		}
		code, body = call(t, fmt.Sprintf("127.0.0.1:%d", httpPort), "", "/metrics")
		for _, want := range []string{`airlock_service_state{service="alpha",state="healthy"} 1`, "airlock_service_health_check_seconds", "process_resident_memory_bytes", "airlock_pod_uptime_seconds"} {
			if code != 200 || !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		out, err := exec.Command(airlockBin, "status", "--socket", pod.socket).Output()
		if err != nil || !strings.Contains(string(out), "ready: yes") || !strings.Contains(string(out), "alpha") {
			t.Errorf("airlock status: %v\n%s", err, out)
		}
		for _, args := range [][]string{{"--socket", pod.socket}, {"--file", pod.events, "--since", "1h"}} {
			out, err = exec.Command(airlockBin, append([]string{"events"}, args...)...).Output()
			if err != nil || !strings.Contains(string(out), `"kind":"ready"`) || !strings.Contains(string(out), `"kind":"boot_step"`) {
				t.Errorf("airlock events %v: %v\n%s", args, err, out)
			}
		}
	})

	t.Run("services reach each other on loopback", func(t *testing.T) {
		code, body := call(t, alpha, e.key, "/peer?port=8002")
		if a := answer(t, body); code != 200 || a["status"] != 200.0 || !strings.Contains(fmt.Sprint(a["body"]), `"beta"`) {
			t.Errorf("alpha → beta: %d %s", code, body)
		}
	})

	url := fmt.Sprintf("/fetch?url=https://api.test:%d/v1/hello", e.tlsPort)
	connect := fmt.Sprintf("/connect?target=api.test:%d", e.tlsPort)
	t.Run("egress decided by each service's own preset", func(t *testing.T) {
		_, body := call(t, alpha, e.key, url)
		if a := answer(t, body); a["status"] != 200.0 || a["body"] != "hello from api.test" {
			t.Errorf("alpha (egress_ok): %s", body)
		}
		_, body = call(t, beta, e.key, connect)
		a := answer(t, body)
		if a["status"] != 403.0 {
			t.Fatalf("beta (egress_none): %s, want 403", body)
		}
		var d struct{ Reason, Preset, Sandbox string }
		json.Unmarshal([]byte(fmt.Sprint(a["body"])), &d)
		if d.Preset != "egress_none" || d.Sandbox != "beta" || d.Reason == "" {
			t.Errorf("beta's denial names sandbox %q preset %q reason %q, want beta and egress_none: %s", d.Sandbox, d.Preset, d.Reason, a["body"])
		}
		// The same CONNECT from alpha is allowed.
		if _, body = call(t, alpha, e.key, connect); answer(t, body)["status"] != 200.0 {
			t.Errorf("alpha's CONNECT: %s", body)
		}
		_, metrics := call(t, fmt.Sprintf("127.0.0.1:%d", httpPort), "", "/metrics")
		for _, sb := range []string{"alpha", "beta"} {
			if !strings.Contains(metrics, `airlock_proxy_decisions_total{decision=`) || !strings.Contains(metrics, `sandbox="`+sb+`"`) {
				t.Errorf("/metrics lacks the decisions of %s", sb)
			}
		}
	})

	t.Run("no way out but the proxy", func(t *testing.T) {
		// The host's loopback addresses (the upstream, the admin port)
		// are other addresses in the pod's own loopback-only namespace.
		for _, addr := range []string{fmt.Sprintf("127.0.0.2:%d", e.tlsPort), fmt.Sprintf("127.0.0.1:%d", httpPort)} {
			_, body := call(t, alpha, e.key, "/direct?addr="+addr)
			if a := answer(t, body); a["connected"] == true || a["errno"] == nil {
				t.Errorf("a direct connect to %s from the pod: %s", addr, body)
			}
		}
	})

	t.Run("a proxy that does not serve leaves egress closed", func(t *testing.T) {
		nsenter := testutil.RequireTool(t, "nsenter")
		netns := fmt.Sprintf("--net=/proc/%d/ns/net", commandPid(t, pod.service("alpha")))
		// A python3 in alpha's cgroup and the pod's namespace: what
		// alpha's preset allows, through the proxy or straight at the
		// upstream's host address.
		leaf := filepath.Join(podGroup(t, "itest"), "airlock-itest-alpha")
		fetch := func(proxy string) error {
			script := fmt.Sprintf(`import urllib.request
urllib.request.urlopen("https://api.test:%d/v1/hello", timeout=2)`, e.tlsPort)
			cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" "$3" "$4" -c "$5"`, "sh", leaf, nsenter, netns, e.python, script)
			cmd.Env = cleanEnv("SSL_CERT_FILE="+filepath.Join(pod.state, "trust", "ca-bundle.pem"), "HTTPS_PROXY="+proxy, "NO_PROXY=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		if err := fetch("http://127.0.0.1:3128"); err != nil {
			t.Fatalf("through the serving proxy, alpha's request must pass: %v", err)
		}
		// The supervisor, and with it the proxy, frozen.
		pod.cmd.Process.Signal(syscall.SIGSTOP)
		defer pod.cmd.Process.Signal(syscall.SIGCONT)
		if fetch("http://127.0.0.1:3128") == nil {
			t.Errorf("alpha's request got through with the proxy frozen")
		}
		// Around the proxy: the upstream's address is not in the pod.
		if fetch(fmt.Sprintf("http://127.0.0.2:%d", e.tlsPort)) == nil {
			t.Errorf("alpha's request got out around the proxy")
		}
	})

	t.Run("ingress needs an operator key", func(t *testing.T) {
		if code, body := call(t, alpha, e.key, "/whoami"); code != 200 {
			t.Errorf("the operator's key: %d %s, want 200", code, body)
		}
		for _, key := range []string{"", "alk_wrong"} {
			code, body := call(t, alpha, key, "/whoami")
			if code != 401 || !strings.Contains(body, "ingress_key_") {
				t.Errorf("key %q: %d %s, want 401", key, code, body)
			}
		}
		// A request's line is written as it ends, which a streamed answer
		// may reach the client before.
		audit := filepath.Join(pod.state, "audit.jsonl")
		waitFor(t, 10*time.Second, func() bool {
			raw, _ := os.ReadFile(audit)
			return strings.Contains(string(raw), `"operator":"itest"`) && strings.Contains(string(raw), `"operator":"unknown"`)
		}, "the ingress audit log names the operator, and unknown for a bad key")
		if raw, _ := os.ReadFile(audit); strings.Contains(string(raw), e.key) {
			t.Errorf("the ingress audit log holds an operator's key")
		}
	})

	t.Run("a killed service is restarted, its dependents are told", func(t *testing.T) {
		before := pod.service("alpha")
		n := pod.eventCount()
		syscall.Kill(commandPid(t, before), syscall.SIGKILL)
		ev, _ := pod.awaitEvent("restart", "alpha", n)
		if ev.Severity != events.Warning {
			t.Errorf("restart event %+v", ev)
		}
		pod.awaitEvent("dependency_restarted", "beta", n)
		after := pod.awaitState("alpha", "healthy")
		if after.Restarts != before.Restarts+1 || after.Pid == before.Pid {
			t.Errorf("alpha after the kill: %+v (before %+v)", after, before)
		}
		if b := pod.service("beta"); b.Restarts != 0 {
			t.Errorf("beta was restarted needlessly: %+v", b)
		}
	})

	t.Run("a hung service fails its health check and is restarted", func(t *testing.T) {
		before := pod.service("alpha")
		n := pod.eventCount()
		syscall.Kill(commandPid(t, before), syscall.SIGSTOP)
		ev, _ := pod.awaitEvent("health", "alpha", n)
		if ev.Severity != events.Critical || !strings.Contains(ev.Detail, "unhealthy") {
			t.Errorf("health event %+v", ev)
		}
		// The event is on record before the state leaves healthy: the
		// restarted instance is the one with one launch more.
		var after supervisor.ServiceStatus
		waitFor(t, 60*time.Second, func() bool {
			after = pod.service("alpha")
			return after.State == "healthy" && after.Launches > before.Launches
		}, "alpha healthy again, relaunched")
		if after.Restarts != before.Restarts+1 {
			t.Errorf("alpha: %+v", after)
		}
	})

	t.Run("an operator restarts a service", func(t *testing.T) {
		before := pod.service("beta")
		if out, err := exec.Command(airlockBin, "restart", "beta", "--socket", pod.socket).CombinedOutput(); err != nil {
			t.Fatalf("airlock restart: %v %s", err, out)
		}
		waitFor(t, 30*time.Second, func() bool { s := pod.service("beta"); return s.Restarts == before.Restarts+1 && s.State == "healthy" }, "beta restarted")
		out, err := exec.Command(airlockBin, "restart", "nosuch", "--socket", pod.socket).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `no service "nosuch"`) {
			t.Errorf("restart of an unknown service: %v %s", err, out)
		}
	})

	t.Run("a live policy edit applies, a broken one is rejected", func(t *testing.T) {
		n := pod.eventCount()
		e.writePreset(t, "egress_none", true)
		pod.awaitEvent("policy_reload", "", n)
		waitFor(t, 10*time.Second, func() bool {
			_, body := call(t, beta, e.key, url)
			return answer(t, body)["status"] == 200.0
		}, "beta allowed after the edit")
		n = pod.eventCount()
		os.WriteFile(filepath.Join(e.bundle, "egress_none.rego"), []byte("package airlock.presets.egress_none\n\nthis is not rego\n"), 0o644)
		pod.awaitEvent("policy_reject", "", n)
		if _, body := call(t, beta, e.key, url); answer(t, body)["status"] != 200.0 {
			t.Errorf("after a rejected edit the last good policy must keep serving: %s", body)
		}
	})

	t.Run("SIGTERM stops everything within the grace period", func(t *testing.T) {
		var pids []int
		var ns string
		for _, s := range pod.status().Services {
			cmd := commandPid(t, s)
			pids = append(pids, s.Pid, cmd)
			ns = netnsOf(cmd)
			// Held open until the check below: the namespace, gone with
			// the pod otherwise, keeps its inode number, which one made
			// meanwhile (another test's sandbox) could be given and be
			// taken for it.
			held, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", cmd))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
		}
		group := podGroup(t, "itest")
		if _, err := os.Stat(group); err != nil {
			t.Fatalf("the pod's cgroup: %v", err)
		}
		pod.stop(10 * time.Second)
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("pid %d outlived the pod", pid)
			}
		}
		if _, err := os.Stat(group); err == nil {
			t.Errorf("the pod's cgroup %s was left behind", group)
		}
		ents, _ := os.ReadDir("/proc")
		for _, d := range ents {
			if pid, err := strconv.Atoi(d.Name()); err == nil && netnsOf(pid) == ns {
				t.Errorf("pid %d is still in the pod's network namespace %s", pid, ns)
			}
		}
		if _, err := os.Stat(pod.socket); err == nil {
			t.Errorf("the admin socket was left behind")
		}
		pod.awaitEvent("stop", "", 0)
	})
}

// TestPodCrashLoopIsGivenUp: a service that keeps dying is restarted with
// backoff, then given up on with a critical event; the rest of the pod
// stays up, not ready.
func TestPodCrashLoopIsGivenUp(t *testing.T) {
	e := newPodEnv(t)
	m := e.manifest("crashloop", "", e.pyService("steady", 8001, "egress_none", "")+`  - name: crasher
    command: [/bin/sh, -c, "sleep 0.3; exit 3"]
    user: "61000"
    preset: egress_none
    restart: {policy: always, backoff: {initial: 20ms, max: 100ms}, give_up: {restarts: 3, window: 60s}}
  - name: stubborn
    command: [/bin/sh, -c, "trap '' TERM; while :; do sleep 1; done"]
    user: "61000"
    preset: egress_none
`)
	pod := startPod(t, e, "crashloop", m)
	pod.awaitReady()
	ev, _ := pod.awaitEvent("give_up", "crasher", 0)
	if ev.Severity != events.Critical || !strings.Contains(ev.Detail, "crash loop") || !strings.Contains(ev.Detail, "exit code 3") {
		t.Errorf("give_up event %+v", ev)
	}
	evs, _ := events.Read(pod.events, time.Time{})
	restarts := 0
	for _, ev := range evs {
		if ev.Kind == "restart" && ev.Service == "crasher" {
			restarts++
		}
	}
	if restarts != 3 {
		t.Errorf("%d restarts before giving up, want 3", restarts)
	}
	// The event is on record before the state changes.
	pod.awaitState("crasher", "given_up")
	st := pod.status()
	if st.Ready || pod.service("crasher").State != "given_up" || pod.service("steady").State != "healthy" {
		t.Errorf("status after the give-up: %+v", st)
	}
	// A service that ignores SIGTERM is killed at the end of the grace
	// period (3s), and the stop leaves nothing.
	stubborn := pod.service("stubborn")
	pod.stop(15 * time.Second)
	if syscall.Kill(stubborn.Pid, 0) == nil {
		t.Errorf("the stubborn service outlived the pod")
	}
	if _, err := os.Stat(podGroup(t, "crashloop")); err == nil {
		t.Errorf("the pod's cgroup outlived it")
	}
}

// TestPodRefusesATamperedBundle: a bundle that fails its pin refuses to
// boot, exit 10, with the mismatch on record.
func TestPodRefusesATamperedBundle(t *testing.T) {
	e := newPodEnv(t)
	hash, err := exec.Command(airlockBin, "policy", "hash", e.bundle).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := e.manifest("tampered", "", e.pyService("alpha", 8001, "egress_ok", ""))
	m = strings.Replace(m, "policy:\n", "policy:\n  sha256: "+strings.TrimSpace(string(hash))+"\n", 1)
	// Pinned, then edited.
	f, _ := os.OpenFile(filepath.Join(e.bundle, "egress_ok.rego"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("# tampered\n")
	f.Close()
	pod := startPod(t, e, "tampered", m)
	select {
	case <-pod.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("airlock up booted a tampered bundle")
	}
	if code := exitCode(pod.exitErr); code != 10 {
		t.Errorf("exit %d, want 10:\n%s", code, pod.stderr.String())
	}
	ev, _ := pod.awaitEvent("pin_mismatch", "", 0)
	if ev.Severity != events.Critical {
		t.Errorf("pin_mismatch event %+v", ev)
	}
	if _, err := os.Stat(podGroup(t, "tampered")); err == nil {
		t.Errorf("a refused boot left its cgroup behind")
	}
}

// TestPodDiesWithItsSupervisor: a supervisor killed outright takes every
// service with it (nothing runs unsupervised, and without the proxy there
// is no way out), and the events file it was writing stays readable.
func TestPodDiesWithItsSupervisor(t *testing.T) {
	e := newPodEnv(t)
	pod := startPod(t, e, "orphan", e.manifest("orphan", "", e.pyService("alpha", 8001, "egress_ok", "")))
	pod.awaitReady()
	st := pod.service("alpha")
	pids := []int{st.Pid, commandPid(t, st)}
	pod.cmd.Process.Kill()
	<-pod.exited
	waitFor(t, 10*time.Second, func() bool {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	}, "the services die with the supervisor")
	if _, err := events.Read(pod.events, time.Time{}); err != nil {
		t.Errorf("the events file after the writer was killed: %v", err)
	}
	// The next boot of the same pod clears what the killed one left.
	pod2 := startPod(t, e, "orphan", e.manifest("orphan", "", e.pyService("alpha", 8001, "egress_ok", "")))
	pod2.awaitReady()
	pod2.stop(10 * time.Second)
}

// TestPodRefusesAnIngressWithoutKeys: there is no unauthenticated ingress:
// a route whose key file is missing or empty refuses the boot, naming it,
// and leaves nothing behind.
func TestPodRefusesAnIngressWithoutKeys(t *testing.T) {
	e := newPodEnv(t)
	empty := filepath.Join(e.dir, "empty.keys")
	os.WriteFile(empty, []byte("# no keys yet\n"), 0o600)
	for _, keys := range []string{filepath.Join(e.dir, "missing.keys"), empty} {
		m := e.manifest("nokeys", fmt.Sprintf(`ingress:
  - {name: alpha, listen: "127.0.0.1:%d", service: alpha, port: 8001, keys: %s}`, testutil.FreePort(t), keys), e.pyService("alpha", 8001, "egress_ok", ""))
		pod := startPod(t, e, "nokeys", m)
		select {
		case <-pod.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("airlock up booted an ingress whose key file is %s", keys)
		}
		if code := exitCode(pod.exitErr); code != 1 || !strings.Contains(pod.stderr.String(), keys) {
			t.Errorf("keys %s: exit %d, want 1 and the file named:\n%s", keys, code, pod.stderr.String())
		}
		if _, err := os.Stat(podGroup(t, "nokeys")); err == nil {
			t.Errorf("a refused boot left its cgroup behind")
		}
	}
}

// An exec health probe runs with its service's limits: it runs as the
// service, with what the service may write, so a service that rewrote what
// its probe runs would otherwise fork (or allocate) without bound through
// it. The probe forks 20 sleeps where the service may have 8 processes.
func TestPodProbeHasItsServiceLimits(t *testing.T) {
	e := newPodEnv(t)
	out := filepath.Join(e.dir, "probe-out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o777)
	forked := filepath.Join(out, "forked")
	m := e.manifest("probelimits", "", fmt.Sprintf(`  - name: limited
    command: [/bin/sleep, "1000"]
    user: "61000"
    preset: egress_none
    pids_max: 8
    landlock: {rw: [%s]}
    health: {exec: [/bin/sh, -c, "for i in $(seq 20); do sleep 5 & echo $i > %s; done"], interval: 3s, timeout: 2s, threshold: 1}
`, out, forked))
	pod := startPod(t, e, "probelimits", m)
	pod.awaitEvent("health", "limited", 0) // healthy, or failed: the first probe has ended
	raw, err := os.ReadFile(forked)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(raw))); err != nil || n > 8 {
		t.Errorf("the probe forked %q sleeps; want fewer than the service's pids_max, 8", raw)
	}
	pod.stop(15 * time.Second)
}

// A service's v1 limit groups (a hybrid host's memory and pids) go under
// a v1 group of its pod's name, as its leaf does in v2: pod v1-a's service
// b and pod v1's service a-b both have the leaf airlock-v1-a-b, and both
// boot; and what a killed run left there is removed by the next boot,
// where it would refuse the service's launch. (On a host of cgroup v2
// only there are no v1 groups: the two pods still boot side by side.)
func TestPodV1GroupsAreThePods(t *testing.T) {
	e := newPodEnv(t)
	svc := func(name string) string {
		return fmt.Sprintf("  - name: %s\n    command: [/bin/sleep, \"1000\"]\n    user: \"61000\"\n    preset: egress_none\n    pids_max: 16\n    memory_max: 64M\n", name)
	}
	var stale []string
	for _, ctrl := range []string{"memory", "pids"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, "cgroup.procs")); err != nil {
			continue // not a v1 hierarchy here
		}
		dir := filepath.Join("/sys/fs/cgroup", ctrl, "airlock-pod-v1-a", "airlock-v1-a-b")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir); os.Remove(filepath.Dir(dir)) })
		stale = append(stale, filepath.Dir(dir))
	}
	a := startPod(t, e, "v1-a", e.manifest("v1-a", "", svc("b")))
	a.awaitReady()
	b := startPod(t, e, "v1", e.manifest("v1", "", svc("a-b")))
	b.awaitReady()
	a.stop(15 * time.Second)
	b.stop(15 * time.Second)
	for _, dir := range append(stale, "/sys/fs/cgroup/memory/airlock-pod-v1", "/sys/fs/cgroup/pids/airlock-pod-v1") {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("v1 group %s outlived its pod (%v)", dir, err)
		}
	}
}

// A service restarted after a crash waits, as its first launch did, for
// the services it comes after: while base is down (in its backoff, 2s),
// dependent, which crashes at once, is not launched again and again.
func TestPodRestartWaitsForWhatItComesAfter(t *testing.T) {
	e := newPodEnv(t)
	m := e.manifest("restartafter", "",
		shService("base", "sleep 0.5; exit 1", "{policy: always, backoff: {initial: 2s, max: 2s}, give_up: {restarts: 100, window: 60s}}", "")+
			shService("dependent", "exit 1", "{policy: always, backoff: {initial: 20ms, max: 50ms}, give_up: {restarts: 1000, window: 60s}}", "    after: [base]\n"))
	pod := startPod(t, e, "restartafter", m)
	// Two of base's outages, each 2s.
	_, i := pod.awaitEvent("exit", "base", 0)
	_, i = pod.awaitEvent("started", "base", i+1)
	_, i = pod.awaitEvent("exit", "base", i+1)
	pod.awaitEvent("started", "base", i+1)
	evs, _ := events.Read(pod.events, time.Time{})
	baseUp, worst, during := false, 0, 0
	for _, ev := range evs {
		switch {
		case ev.Service == "base" && ev.Kind == "started":
			baseUp, during = true, 0
		case ev.Service == "base" && ev.Kind == "exit":
			baseUp = false
		case ev.Service == "dependent" && ev.Kind == "started" && !baseUp:
			// One may have been decided just before base went.
			if during++; during > worst {
				worst = during
			}
		}
	}
	if worst > 1 {
		t.Errorf("dependent was launched %d times in one outage of base, which it comes after; want at most once", worst)
	}
	pod.stop(15 * time.Second)
}

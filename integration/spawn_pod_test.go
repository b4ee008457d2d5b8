package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
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
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/local"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// podSpawnEnv is a spawn env and a running pod whose one service is
// decided by egress_none (no rules): whatever a one-off sandbox of the pod
// reaches, it reaches by its own preset.
type podSpawnEnv struct {
	*spawnEnv
	pod  *runningPod
	name string
}

func newPodSpawnEnv(t *testing.T, name string) *podSpawnEnv {
	e := &podSpawnEnv{spawnEnv: newSpawnEnv(t), name: name}
	e.pod = startPod(t, e.podEnv, name, e.manifest(name, "", e.pyService("svc", 18080, "egress_none", "")))
	e.pod.awaitReady()
	return e
}

// oneOffUID is the uid one-offs run as: the pod services' (pyService).
const oneOffUID = 61000

// spec is a one-off sandbox running command in a fresh directory of its
// own (its output, audit copy and prompt there, its work dir below).
func (e *podSpawnEnv) spec(t *testing.T, id, preset string, command ...string) local.Spec {
	t.Helper()
	dir := filepath.Join(e.dir, id)
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(work, oneOffUID, oneOffUID)
	os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte("a prompt"), 0o644)
	return local.Spec{ID: id, Preset: preset, Command: command, Dir: work, RW: []string{work}, RO: []string{dir},
		UID: oneOffUID, GID: oneOffUID,
		Stdout: filepath.Join(dir, "stdout.log"), Stderr: filepath.Join(dir, "stderr.log"), Audit: filepath.Join(dir, "audit.jsonl")}
}

func (e *podSpawnEnv) launcher() local.PodLauncher { return local.PodLauncher{Socket: e.pod.socket} }

// A one-off sandbox in the pod is decided by the preset its launcher
// named, not by the pod's services': its allowed request reaches the
// upstream, its denied one is refused, both audited in its own file (and
// the pod's log) as its id and preset; and the pod's DNS answerer resolves
// what that preset may reach while it runs. Its cgroup leaf is gone after.
func TestPodSandboxDecidedByItsPreset(t *testing.T) {
	e := newPodSpawnEnv(t, "oneoff-preset")
	api := fmt.Sprintf("https://api.test:%d", e.tlsPort)
	s := e.spec(t, "spawn-net", "egress_ok", e.agent, filepath.Join(e.dir, "spawn-net", "prompt.txt"), "net", api+"/v1/hello", api+"/v2/secret")
	s.Kind = "fetcher"
	sb, err := e.launcher().Launch(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	code, err := sb.Wait()
	if err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v; want 0\nstderr: %s", code, err, readFile(s.Stderr))
	}
	var got struct {
		Allowed struct{ Status int }
		Denied  struct {
			Status int
			Body   string
		}
	}
	lines := readLines(t, s.Stdout)
	json.Unmarshal([]byte(lines[len(lines)-1]), &got)
	if got.Allowed.Status != 200 || got.Denied.Status != 403 || !strings.Contains(got.Denied.Body, "path_not_allowed") {
		t.Fatalf("the sub-agent's result %+v; want 200 and 403 path_not_allowed\nstdout: %s", got, readFile(s.Stdout))
	}
	decided := map[string]bool{}
	for _, l := range readLines(t, s.Audit) {
		var a struct {
			auditLine
			Sandbox, Preset, Kind string
		}
		json.Unmarshal([]byte(l), &a)
		if a.Sandbox != "spawn-net" || a.Preset != "egress_ok" || a.Kind != "fetcher" || a.Binary != e.python {
			t.Errorf("the sandbox's audit file holds a line of another: %s", l)
		}
		decided[a.Path+" "+a.Reason] = true
	}
	if !decided["/v2/secret path_not_allowed"] || !decided["/v1/hello "] && !decided["/v1/hello allowed"] {
		t.Errorf("audit.jsonl lacks the allow of /v1/hello or the denial of /v2/secret: %v", decided)
	}
	if fi, err := os.Stat(s.Audit); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit.jsonl: %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(podGroup(t, e.name), "airlock-spawn-net")); !os.IsNotExist(err) {
		t.Errorf("the one-off's cgroup leaf is left (%v)", err)
	}

	// DNS: the services' preset reaches nothing, the one-off's api.test.
	r := e.spec(t, "spawn-dns", "egress_ok", e.python, "-c", "import socket; print(socket.gethostbyname('api.test'))")
	sb, err = e.launcher().Launch(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := sb.Wait(); err != nil || code != 0 {
		t.Fatalf("resolving api.test in the one-off: exit %d, %v\nstderr: %s", code, err, readFile(r.Stderr))
	}
	if addr := strings.TrimSpace(readFile(r.Stdout)); !strings.HasPrefix(addr, "198.18.") && !strings.HasPrefix(addr, "198.19.") {
		t.Errorf("api.test resolved to %q in the one-off; want a fake address of the pod's answerer", addr)
	}
}

// A pinned one-off runs only the file its pin names: the pod's sandbox
// hashes the binary it execs, so one that is not the pinned file (swapped
// after the launcher's check) is refused at setup, naming both digests,
// and nothing runs; the right pin runs it.
func TestPodSandboxChecksItsPin(t *testing.T) {
	e := newPodSpawnEnv(t, "oneoff-pin")
	raw, err := os.ReadFile(e.python)
	if err != nil {
		t.Fatal(err)
	}
	right := fmt.Sprintf("%x", sha256.Sum256(raw))
	wrong := fmt.Sprintf("%x", sha256.Sum256([]byte("another binary")))
	// The command leaves a file in its work dir: whether it ran.
	ran := func(pin, id string) (local.Spec, string) {
		s := e.spec(t, id, "egress_ok", e.python, "-c", "open('ran', 'w').write('ran')")
		s.SHA256 = pin
		return s, filepath.Join(s.Dir, "ran")
	}

	s, marker := ran(wrong, "spawn-pin-wrong")
	sb, err := e.launcher().Launch(context.Background(), s)
	if err == nil {
		_, err = sb.Wait()
	}
	if err == nil || !strings.Contains(err.Error(), wrong) {
		t.Fatalf("a one-off pinned to another digest: %v; want a setup failure naming %s", err, wrong)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the wrongly pinned command ran (%v)", err)
	}

	s, marker = ran(right, "spawn-pin-right")
	sb, err = e.launcher().Launch(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := sb.Wait(); err != nil || code != 0 {
		t.Fatalf("the rightly pinned one-off: exit %d, %v\nstderr: %s", code, err, readFile(s.Stderr))
	}
	if readFile(marker) != "ran" {
		t.Fatal("the rightly pinned command did not run")
	}
}

func withEnv(s local.Spec, env ...string) local.Spec {
	s.Env = append(s.Env, env...)
	return s
}

func readFile(path string) string {
	raw, _ := os.ReadFile(path)
	return string(raw)
}

// A launch the pod cannot serve is refused before anything runs, naming
// the field: a preset not in its bundle, a relative command, an id
// running already; a pod that does not answer is ErrNoPod.
func TestPodSandboxRefusals(t *testing.T) {
	e := newPodSpawnEnv(t, "oneoff-refuse")
	marker := fmt.Sprintf("oneoff-refuse-%d", time.Now().UnixNano())
	running := e.spec(t, "spawn-dup", "egress_ok", e.python, "-c", sleeperScript, marker)
	sb, err := e.launcher().Launch(context.Background(), running)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sb.Stop(0); sb.Wait() }()
	dup := running
	dup.Stdout, dup.Stderr, dup.Audit = dup.Stdout+"2", dup.Stderr+"2", dup.Audit+"2"
	for _, tc := range []struct {
		name string
		spec local.Spec
		want string
	}{
		{"no such preset", e.spec(t, "spawn-nopreset", "nope", e.agent), `preset "nope": not in the pod's policy`},
		{"relative command", e.spec(t, "spawn-relative", "egress_ok", "python3"), `command ["python3"]: want an absolute binary`},
		{"id running", dup, `id "spawn-dup": a sandbox of that id is running`},
		{"the sandbox's proxy variable", withEnv(e.spec(t, "spawn-env", "egress_ok", e.agent), "https_proxy=http://elsewhere.test:1"), `env https_proxy: the sandbox's`},
	} {
		_, err := e.launcher().Launch(context.Background(), tc.spec)
		var ue *spawn.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Launch = %v; want a usage error naming %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(tc.spec.Stdout); !os.IsNotExist(err) {
			t.Errorf("%s: its stdout file is there (%v)", tc.name, err)
		}
	}
	_, err = local.PodLauncher{Socket: filepath.Join(e.dir, "no-pod.sock")}.Launch(context.Background(), e.spec(t, "spawn-nopod", "egress_ok", e.agent))
	if !errors.Is(err, adminclient.ErrNoPod) {
		t.Errorf("Launch on no pod = %v; want ErrNoPod", err)
	}
}

// A one-off ends, with every process of it, when its launcher stops it,
// when an operator does (DELETE), when its launcher's connection closes (the launcher died), and when the
// pod stops.
func TestPodSandboxStops(t *testing.T) {
	e := newPodSpawnEnv(t, "oneoff-stop")
	gone := func(marker string) {
		testutil.WaitFor(t, "no process of "+marker+" left", func() bool { return len(withArg(marker)) == 0 })
	}
	sleeper := func(id string) (local.Spec, string) {
		marker := fmt.Sprintf("%s-%d", id, time.Now().UnixNano())
		return e.spec(t, id, "egress_ok", e.python, "-c", sleeperScript, marker), marker
	}

	s, marker := sleeper("spawn-stopped")
	sb, err := e.launcher().Launch(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the sleeper and its child", func() bool { return len(withArg(marker)) >= 2 })
	sb.Stop(time.Second)
	if code, err := sb.Wait(); err != nil || code <= 128 {
		t.Errorf("a stopped one-off: Wait = %d, %v; want killed by a signal", code, err)
	}
	gone(marker)

	// An operator's DELETE stops it the same way, and answers its exit.
	s, marker = sleeper("spawn-deleted")
	sb, err = e.launcher().Launch(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the sleeper and its child", func() bool { return len(withArg(marker)) >= 2 })
	resp, err := adminclient.Do(context.Background(), e.pod.socket, http.MethodDelete, adminclient.StopPath(s.ID, time.Second))
	if err != nil {
		t.Fatalf("DELETE %s: %v", s.ID, err)
	}
	var exit adminclient.SandboxExit
	json.NewDecoder(resp.Body).Decode(&exit)
	resp.Body.Close()
	if code, err := sb.Wait(); err != nil || code <= 128 || exit.Exit != code {
		t.Errorf("a one-off stopped by DELETE: Wait = %d, %v, DELETE answered %+v; want killed by a signal, both", code, err, exit)
	}
	gone(marker)

	// The launcher dies: its connection closes without a word.
	s, marker = sleeper("spawn-orphan")
	conn := rawLaunch(t, e.pod.socket, s)
	testutil.WaitFor(t, "the orphan's processes", func() bool { return len(withArg(marker)) >= 2 })
	conn.Close()
	gone(marker)

	s, marker = sleeper("spawn-podstop")
	sb, err = e.launcher().Launch(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the sleeper and its child", func() bool { return len(withArg(marker)) >= 2 })
	// One that ignores SIGTERM, which its launcher has given an hour to
	// stop: the pod's stop_grace (3s) still rules it.
	stubbornMarker := fmt.Sprintf("spawn-stubborn-%d", time.Now().UnixNano())
	stubborn, err := e.launcher().Launch(context.Background(),
		e.spec(t, "spawn-stubborn", "egress_ok", e.python, "-c", "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); exec(sys.argv[2])", stubbornMarker, sleeperScript))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the stubborn sleeper and its child", func() bool { return len(withArg(stubbornMarker)) >= 2 })
	stubborn.Stop(time.Hour)
	e.pod.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.pod.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock up still stopping 60s after SIGTERM (stop_grace 3s): a one-off's hour of grace ruled")
	}
	if e.pod.exitErr != nil {
		t.Errorf("airlock up with a one-off running: %v", e.pod.exitErr)
	}
	gone(marker)
	gone(stubbornMarker)
	// Stopped as the services are, SIGTERM first, and told its launcher.
	if code, err := sb.Wait(); err != nil || code != 128+int(syscall.SIGTERM) {
		t.Errorf("a one-off of a stopped pod: Wait = %d, %v; want 143 (SIGTERM)", code, err)
	}
	if code, err := stubborn.Wait(); err != nil || code != 128+int(syscall.SIGKILL) {
		t.Errorf("a one-off ignoring SIGTERM in a stopped pod: Wait = %d, %v; want 137 (killed at stop_grace)", code, err)
	}
}

// sleeperScript (python3 -c) starts a child that sleeps, then sleeps
// itself: both carry its argument, a marker the test finds them by.
const sleeperScript = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]]); time.sleep(600)"

// rawLaunch launches s as adminclient does, and hands back the upgraded
// connection: its close is a launcher's death.
func rawLaunch(t *testing.T, socket string, s local.Spec) net.Conn {
	t.Helper()
	body, _ := json.Marshal(adminclient.SandboxSpec{ID: s.ID, Preset: s.Preset, Command: s.Command, Dir: s.Dir, RW: s.RW, RO: s.RO,
		UID: s.UID, GID: s.GID, Stdout: s.Stdout, Stderr: s.Stderr, Audit: s.Audit})
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	// Whitespace after the JSON value, more than a decoder reads ahead:
	// still the body, not a stop line on the upgraded stream.
	req, _ := http.NewRequest(http.MethodPost, "http://pod"+adminclient.SandboxesPath, strings.NewReader(string(body)+strings.Repeat(" ", 64<<10)+"\n"))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", adminclient.SandboxUpgrade)
	req.Write(conn)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("launch: %v %v", resp, err)
	}
	return conn
}

// `airlock spawn --pod-socket` runs the sub-agent inside the pod: decided
// by the kind's preset (the pod's one service has none that reaches
// api.test), its audit lines in the task's audit.jsonl and in the pod's
// log, its ledger and result as for a local spawn.
func TestSpawnInPod(t *testing.T) {
	e := newPodSpawnEnv(t, "spawn-pod")
	api := fmt.Sprintf("https://api.test:%d", e.tlsPort)
	e.kind(t, "fetcher", "2m", 100, "net", api+"/v1/hello", api+"/v2/secret")
	code, out, errs := e.spawn(t, 1000, "--kind", "fetcher", "--pod-socket", e.pod.socket)
	if code != 0 {
		t.Fatalf("airlock spawn --pod-socket = %d\n%s%s", code, out, errs)
	}
	var printed spawn.Result
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("spawn printed %q: %v", out, err)
	}
	id := printed.Task
	entries, _ := e.ledger(t)
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running done]" {
		t.Fatalf("ledger of %s: %v; want [queued running done]", id, got)
	}
	dir := orchestrator.Home{Dir: e.home}.Subagent(id)
	checkFetched(t, dir, id, "local")
	for _, log := range []string{filepath.Join(dir, local.AuditFile), filepath.Join(e.pod.state, "audit.jsonl")} {
		checkSecretDenied(t, log, "spawn-"+id, "fetcher", e.python)
	}
}

// In a pod a timed-out sub-agent is killed with every process of it
// (exit 124, none left in the pod's cgroup), and a SIGKILLed `airlock
// spawn` takes its sub-agent with it: the pod sees its connection close.
func TestSpawnInPodEnds(t *testing.T) {
	e := newPodSpawnEnv(t, "spawn-pod-end")
	marker := fmt.Sprintf("spawn-pod-timeout-%d", time.Now().UnixNano())
	e.kind(t, "sleeper", "2s", 100, "sleep", marker)
	code, out, errs := e.spawn(t, 1000, "--kind", "sleeper", "--pod-socket", e.pod.socket)
	var res spawn.Result
	json.Unmarshal([]byte(out), &res)
	if code != spawn.ExitTimeout || res.Status != ledger.Timeout {
		t.Fatalf("airlock spawn --pod-socket of a sleeper = %d, %+v; want 124, timeout\n%s", code, res, errs)
	}
	testutil.WaitFor(t, "no process of the timed-out sub-agent left", func() bool { return len(withArg(marker)) == 0 })
	if _, err := os.Stat(filepath.Join(podGroup(t, e.name), "airlock-spawn-"+res.Task)); !os.IsNotExist(err) {
		t.Errorf("the timed-out sub-agent's cgroup is left in the pod's (%v)", err)
	}

	marker = fmt.Sprintf("spawn-pod-killed-%d", time.Now().UnixNano())
	e.kind(t, "sleeper", "10m", 100, "sleep", marker)
	cmd := exec.Command(airlockBin, "spawn", "--home", e.home, "--task-file", e.task, "--kind", "sleeper",
		"--daily-tokens", "1000", "--policy", e.bundle, "--pod-socket", e.pod.socket, "--log-level", "warn")
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the sub-agent's sleep", func() bool { return len(withArg(marker)) >= 2 })
	cmd.Process.Kill()
	cmd.Wait()
	testutil.WaitFor(t, "no process of the killed spawn's sub-agent left", func() bool { return len(withArg(marker)) == 0 })
}

// A spawn the pod cannot serve fails loudly and runs nothing: a kind whose
// preset the pod's bundle lacks is refused (exit 2, naming the preset), a
// pod serving another bundle than the spawn verified is an integrity
// failure (exit 10), and a pod that does not answer is an error (exit 1), never a fallback
// to a sandbox outside the pod.
func TestSpawnInPodRefused(t *testing.T) {
	e := newPodSpawnEnv(t, "spawn-pod-refuse")
	// The spawn's bundle has a preset the pod's lacks.
	other := filepath.Join(e.dir, "other-bundle")
	os.MkdirAll(other, 0o755)
	for _, name := range []string{"egress_ok", "egress_none"} {
		raw, _ := os.ReadFile(filepath.Join(e.bundle, name+".rego"))
		os.WriteFile(filepath.Join(other, name+".rego"), raw, 0o644)
	}
	raw, _ := os.ReadFile(filepath.Join(e.bundle, "egress_ok.rego"))
	os.WriteFile(filepath.Join(other, "extra_ok.rego"), []byte(strings.Replace(string(raw), "presets.egress_ok", "presets.extra_ok", 1)), 0o644)
	e.kind(t, "extra", "1m", 100, "quick")
	kindFile := filepath.Join(e.home, "kinds", "extra.yaml")
	src, _ := os.ReadFile(kindFile)
	os.WriteFile(kindFile, []byte(strings.Replace(string(src), "preset: egress_ok", "preset: extra_ok", 1)), 0o644)
	e.kind(t, "quick", "1m", 100, "quick")

	for _, tc := range []struct {
		name, kind, socket, bundle string
		code                       int
		want                       string
	}{
		{"preset the pod lacks", "extra", e.pod.socket, other, 2, `preset "extra_ok": not in the pod's policy`},
		{"another bundle", "quick", e.pod.socket, other, 10, "not the bundle its launcher verified"},
		{"no pod", "quick", filepath.Join(e.dir, "no-pod.sock"), e.bundle, 1, "the pod's admin socket does not answer"},
	} {
		cmd := exec.Command(airlockBin, "spawn", "--home", e.home, "--task-file", e.task, "--kind", tc.kind,
			"--daily-tokens", "1000", "--policy", tc.bundle, "--pod-socket", tc.socket, "--log-level", "warn")
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if code := exitCode(err); code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: airlock spawn = %d; want %d naming %q\n%s", tc.name, code, tc.code, tc.want, out)
		}
	}
	entries, _ := e.ledger(t)
	for _, en := range entries {
		if en.Status == ledger.Done {
			t.Errorf("a refused spawn ran: %+v", en)
		}
		if _, err := os.Stat(filepath.Join(orchestrator.Home{Dir: e.home}.Subagent(en.Task), local.StdoutFile)); !os.IsNotExist(err) {
			t.Errorf("task %s has a stdout.log (%v): something ran", en.Task, err)
		}
	}
}

// A one-off refused for its files leaves none of them behind, so that the
// launch can be asked again: stdout and stderr naming one file are refused
// as such (not as a file that exists, which the first had made), and the
// same launch with a stderr of its own then runs.
func TestPodSandboxRefusedForItsFilesLeavesNone(t *testing.T) {
	e := newPodSpawnEnv(t, "oneoff-files")
	s := e.spec(t, "spawn-files", "egress_none", "/bin/true")
	s.Stderr = s.Stdout
	_, err := e.launcher().Launch(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "stdout and stderr name the same file") {
		t.Fatalf("Launch with stdout and stderr one file = %v; want it refused as such", err)
	}
	for _, f := range []string{s.Stdout, s.Audit} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("the refused launch left %s (%v)", f, err)
		}
	}
	s.Stderr = filepath.Join(filepath.Dir(s.Stdout), "stderr.log")
	sb, err := e.launcher().Launch(context.Background(), s)
	if err != nil {
		t.Fatalf("the launch asked again, with a stderr of its own: %v", err)
	}
	if code, err := sb.Wait(); err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v; want 0", code, err)
	}
}

// What a pod launches may hang in its setup for good (a path given on a
// FUSE mount whose server never answers): an operator's stop of such a
// one-off, and the pod's own stop, hold no longer than their grace, and
// the one-off's launcher hears why; so does the stop of a pod whose
// service hangs in its setup at boot.
func TestPodStopsWhatHangsInSetup(t *testing.T) {
	e := newPodSpawnEnv(t, "oneoff-hung")
	hung := testutil.HungFUSE(t)
	launch := func(id string) <-chan error {
		s := e.spec(t, id, "egress_ok", "/bin/true")
		s.RO = append(s.RO, hung)
		failed := make(chan error, 1)
		go func() {
			sb, err := e.launcher().Launch(context.Background(), s)
			if err == nil {
				sb.Wait()
			}
			failed <- err
		}()
		waitFor(t, 20*time.Second, func() bool { return testutil.WaitsOnFUSE(e.pod.cmd.Process.Pid) }, "the one-off %s waiting on the hung mount", id)
		return failed
	}
	heard := func(failed <-chan error, id string) {
		t.Helper()
		select {
		case err := <-failed:
			if err == nil || !strings.Contains(err.Error(), "setup stopped before the command ran: stopped while it was being set up") {
				t.Errorf("the launcher of %s, stopped while its setup hung: %v; want a failed launch saying why", id, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the launcher of %s still waiting a minute after its stop", id)
		}
	}

	failed := launch("hung-deleted")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := adminclient.Do(ctx, e.pod.socket, http.MethodDelete, adminclient.StopPath("hung-deleted", time.Second))
	if err != nil {
		t.Fatalf("DELETE of a one-off whose setup hangs (grace 1s): %v", err)
	}
	var exit adminclient.SandboxExit
	json.NewDecoder(resp.Body).Decode(&exit)
	resp.Body.Close()
	if exit.Exit != 125 || !strings.Contains(exit.Error, "setup stopped before the command ran") {
		t.Errorf("DELETE of a one-off whose setup hangs answered %+v; want 125, saying why", exit)
	}
	heard(failed, "hung-deleted")

	// airlock launch --pod-socket, ^C'd while the pod sets its sandbox up.
	cmd := exec.Command(airlockBin, "launch", "--pod-socket", e.pod.socket, "--preset", "egress_ok", "--user", fmt.Sprint(oneOffUID),
		"--sandbox-id", "hung-cli", "--stop-timeout", "1s", "--ro", hung, "--", "/bin/true")
	cmd.Env = cleanEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	waitFor(t, 20*time.Second, func() bool { return testutil.WaitsOnFUSE(e.pod.cmd.Process.Pid) }, "the launch's one-off waiting on the hung mount")
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("airlock launch --pod-socket still waiting a minute after ^C, its sandbox's setup hung: %s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(stderr.String(), "setup stopped before the command ran: stopped while it was being set up") {
		t.Errorf("airlock launch --pod-socket ^C'd in a hung setup: exit %d, %s; want 125, saying so", code, stderr.String())
	}
	waitFor(t, 20*time.Second, func() bool { return !testutil.WaitsOnFUSE(e.pod.cmd.Process.Pid) }, "the pod to end the setup of the launch it lost")

	failed = launch("hung-podstop")
	e.pod.stop(time.Minute) // stop_grace 3s
	heard(failed, "hung-podstop")

	svc := e.pyService("svc", 18080, "egress_none", "")
	hungSvc := strings.Replace(svc, "landlock: {ro: [", "landlock: {ro: ["+hung+", ", 1)
	if hungSvc == svc {
		t.Fatalf("no landlock line to give the hung path in:\n%s", svc)
	}
	pod := startPod(t, e.podEnv, "boot-hung", e.manifest("boot-hung", "", hungSvc))
	waitFor(t, 20*time.Second, func() bool { return testutil.WaitsOnFUSE(pod.cmd.Process.Pid) }, "the service waiting on the hung mount")
	pod.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pod.exited:
	case <-time.After(time.Minute):
		t.Fatalf("airlock up, its service's setup hung at boot, still running a minute after SIGTERM (stop_grace 3s):\n%s", pod.stderr.String())
	}
}

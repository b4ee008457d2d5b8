package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// podLaunch runs `airlock launch --pod-socket` for the pod and returns its
// stdout, stderr and exit code.
func (e *podSpawnEnv) podLaunch(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(airlockBin, append([]string{"launch", "--pod-socket", e.pod.socket}, args...)...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// `airlock launch --pod-socket` runs its command in the pod, on the
// launcher's own stdout and stderr, and exits with its status; the pod's
// proxy decides its connections with the preset it named (an allowed and a
// denied request), and the pod's copy of its audit lines names it.
func TestLaunchInPod(t *testing.T) {
	e := newPodSpawnEnv(t, "launch-pod")
	dir := filepath.Join(e.dir, "launch-pod-run")
	os.MkdirAll(dir, 0o755)
	prompt := filepath.Join(dir, "prompt.txt")
	os.WriteFile(prompt, []byte("a prompt"), 0o644)
	audit := filepath.Join(dir, "audit.jsonl")
	api := fmt.Sprintf("https://api.test:%d", e.tlsPort)

	stdout, stderr, code := e.podLaunch(t, "--preset", "egress_ok", "--user", fmt.Sprint(oneOffUID), "--sandbox-id", "launched",
		"--ro", dir, "--audit-log", audit, "--", e.agent, prompt, "net", api+"/v1/hello", api+"/v2/secret")
	if code != 0 {
		t.Fatalf("exit %d; want 0\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var got struct {
		Allowed struct{ Status int }
		Denied  struct {
			Status int
			Body   string
		}
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &got)
	if lines[0] != "sub-agent starting" || got.Allowed.Status != 200 || got.Denied.Status != 403 || !strings.Contains(got.Denied.Body, "path_not_allowed") {
		t.Fatalf("the launched command's stdout %q; want its first line, then 200 and 403 path_not_allowed", stdout)
	}
	decided := map[string]bool{}
	for _, l := range readLines(t, audit) {
		var a struct {
			auditLine
			Sandbox, Preset string
		}
		json.Unmarshal([]byte(l), &a)
		if a.Sandbox != "launched" || a.Preset != "egress_ok" || a.Binary != e.python {
			t.Errorf("the launch's audit copy holds a line of another: %s", l)
		}
		decided[a.Path+" "+a.Reason] = true
	}
	if !decided["/v2/secret path_not_allowed"] || !decided["/v1/hello "] && !decided["/v1/hello allowed"] {
		t.Errorf("the audit copy lacks the allow of /v1/hello or the denial of /v2/secret: %v", decided)
	}

	// The services' ports, open to the services on the pod's loopback,
	// are not the one-off's: its preset decides what it reaches, and a
	// service (one the proxy gives credentials, say) is not its way
	// around that. Its connection is reset; the service answers its own
	// health check all along.
	stdout, stderr, code = e.podLaunch(t, "--preset", "egress_ok", "--user", fmt.Sprint(oneOffUID), "--",
		"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/18080 && echo reached-the-service")
	if code == 0 || strings.Contains(stdout, "reached-the-service") || !strings.Contains(stderr, "Connection refused") {
		t.Errorf("a one-off connecting to the service's port: exit %d, stdout %q, stderr %q; want refused", code, stdout, stderr)
	}

	// Its exit status and both streams pass through.
	stdout, stderr, code = e.podLaunch(t, "--preset", "egress_ok", "--user", fmt.Sprint(oneOffUID), "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7")
	if code != 7 || stdout != "to-stdout\n" || !strings.Contains(stderr, "to-stderr") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 7, to-stdout, to-stderr", code, stdout, stderr)
	}
}

// What the pod decides is refused with exit 2, naming the flag or the
// preset, and a pin of another bundle than the pod's with 10 (integrity);
// nothing runs.
func TestLaunchInPodRefusals(t *testing.T) {
	e := newPodSpawnEnv(t, "launch-pod-refuse")
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a policy of its own", []string{"--preset", "egress_ok", "--policy", e.dir, "--", "/bin/true"}, 2, "--policy: with --pod-socket the pod decides"},
		{"limits", []string{"--preset", "egress_ok", "--rlimit", "nproc=10", "--net", "none", "--", "/bin/true"}, 2, "--net, --rlimit: with --pod-socket"},
		{"no preset", []string{"--", "/bin/true"}, 2, "--pod-socket needs --preset"},
		{"a preset the pod lacks", []string{"--preset", "nosuch", "--", "/bin/true"}, 2, `preset "nosuch": not in the pod's policy`},
		// A pin is the pod's to check against what it serves.
		{"another bundle's pin", []string{"--preset", "egress_ok", "--policy-sha256", "sha256:" + strings.Repeat("0", 64), "--", "/bin/true"}, 10, "the pod's proxy decides with policy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := e.podLaunch(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, c.code, c.want)
			}
		})
	}
}

// A pod killed with SIGKILL cleans up nothing itself: its one tree reaper
// kills what ran under its cgroup, a one-off launched into it included
// (whose leaf has no reaper of its own), and removes every group.
func TestPodKilledLeavesNoCgroup(t *testing.T) {
	e := newPodSpawnEnv(t, "launch-pod-kill")
	group := podGroup(t, e.name)
	cmd := exec.Command(airlockBin, "launch", "--pod-socket", e.pod.socket, "--preset", "egress_ok", "--user", fmt.Sprint(oneOffUID),
		"--sandbox-id", "doomed", "--", "/bin/sleep", "600")
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	leaf := filepath.Join(group, "airlock-doomed")
	testutil.WaitFor(t, "the one-off's leaf to hold its command", func() bool {
		raw, _ := os.ReadFile(filepath.Join(leaf, "cgroup.procs"))
		return len(strings.Fields(string(raw))) > 0
	})
	e.pod.cmd.Process.Kill()
	testutil.WaitFor(t, "the pod's cgroup tree to be removed", func() bool {
		_, err := os.Stat(group)
		return os.IsNotExist(err)
	})
}

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
func gated(e *podEnv, script string) string {
	return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; %s", filepath.Join(e.dir, "gate"), script)
}

func openGate(t *testing.T, e *podEnv) {
	if err := os.WriteFile(filepath.Join(e.dir, "gate"), nil, 0o644); err != nil {
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
		shService("crasher", gated(e, "echo about to fail; exit 3"), slowRestart, "")+
		shService("hog", gated(e, "exec "+hog), slowRestart, "    memory_max: 64M\n")+
		shService("flood", gated(e, flood), slowRestart, ""))
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

package main

import (
	"strings"
	"testing"
)

// A flag the pod decides is refused beside --pod-socket even when an
// AIRLOCK_* variable set it, and the refusal names the variable: the user
// typed no such flag.
func TestPodLaunchNamesTheVariable(t *testing.T) {
	t.Setenv("AIRLOCK_POLICY", t.TempDir())
	var out, errs strings.Builder
	code := run([]string{"launch", "--pod-socket", "/nonexistent/pod.sock", "--preset", "strict", "--", "/bin/true"}, strings.NewReader(""), &out, &errs)
	if code != ExitUsage || !strings.Contains(errs.String(), "--policy (from AIRLOCK_POLICY in the environment: unset it)") {
		t.Fatalf("exit %d, stderr %q; want %d naming AIRLOCK_POLICY", code, errs.String(), ExitUsage)
	}
}

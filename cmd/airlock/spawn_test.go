package main

import (
	"strings"
	"testing"
)

// A per-sandbox proxy flag is refused rather than ignored.
func TestSpawnRefusesPerSandboxFlags(t *testing.T) {
	for _, flag := range []string{"--audit-log", "--metrics"} {
		code, _, errs := airlock(t, "", "spawn", "--kind", "k", "--task-file", "t", flag, "x")
		if code != ExitUsage || !strings.Contains(errs, flag+" is per sandbox") {
			t.Errorf("spawn %s = %d %q; want a usage error naming it", flag, code, errs)
		}
	}
}

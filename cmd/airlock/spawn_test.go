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

// A proxy limit that would enforce nothing is a usage error before
// anything is reserved, as for airlock launch.
func TestSpawnRefusesZeroLimits(t *testing.T) {
	for _, flag := range []string{"--max-conns", "--idle-timeout"} {
		code, _, errs := airlock(t, "", "spawn", "--kind", "k", "--task-file", "t", flag, "0", "--home", t.TempDir())
		if code != ExitUsage || !strings.Contains(errs, flag+" must be positive") {
			t.Errorf("spawn %s 0 = %d %q; want a usage error naming it", flag, code, errs)
		}
	}
}

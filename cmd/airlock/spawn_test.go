package main

import (
	"slices"
	"strings"
	"testing"
)

// The launcher gets the bundle and proxy flags the operator gave spawn,
// each value of a repeated flag as its own flag, and never the pin (the
// substrate pins the hash the spawn verified) or a per-sandbox flag.
func TestSpawnForwardsLaunchFlags(t *testing.T) {
	cmd := newSpawnCmd()
	if err := cmd.ParseFlags([]string{"--kind", "k", "--policy", "/b", "--policy-sha256", "sha256:" + strings.Repeat("a", 64),
		"--resolve", "a.test:443:127.0.0.2", "--resolve", "b.test:443:127.0.0.3", "--ca-dir", "/ca", "--max-conns", "7", "--daily-tokens", "9"}); err != nil {
		t.Fatal(err)
	}
	got := launchArgs(cmd)
	slices.Sort(got)
	want := []string{"--ca-dir=/ca", "--max-conns=7", "--policy=/b", "--resolve=a.test:443:127.0.0.2", "--resolve=b.test:443:127.0.0.3"}
	if !slices.Equal(got, want) {
		t.Fatalf("launchArgs = %q; want %q", got, want)
	}
}

// A per-sandbox proxy flag is refused rather than ignored.
func TestSpawnRefusesPerSandboxFlags(t *testing.T) {
	for _, flag := range []string{"--audit-log", "--metrics"} {
		code, _, errs := airlock(t, "", "spawn", "--kind", "k", "--task-file", "t", flag, "x")
		if code != ExitUsage || !strings.Contains(errs, flag+" is per sandbox") {
			t.Errorf("spawn %s = %d %q; want a usage error naming it", flag, code, errs)
		}
	}
}

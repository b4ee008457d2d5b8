package main

import (
	"os"
	"strings"
	"testing"
)

// An orchestrator home that cannot be found is a usage error (2) from
// every command that needs one, named as such.
func TestNoHomeIsAUsageError(t *testing.T) {
	// A relative home made absolute against a directory that is gone.
	gone := t.TempDir()
	t.Chdir(gone)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"collect", "--today"},
		{"gate", "--action", "push", "--target", "main"},
		{"ledger"},
		{"spawn", "--kind", "coder", "--task-file", "/dev/null"},
		{"spawn", "poll"},
		{"spawn", "gc", "--git-remote", "/nonexistent"},
	} {
		code, _, stderr := airlock(t, "", append(args, "--home", "relative")...)
		if code != ExitUsage || !strings.Contains(stderr, `--home "relative"`) {
			t.Errorf("airlock %s with no home: exit %d, %q; want %d naming --home", strings.Join(args, " "), code, stderr, ExitUsage)
		}
	}
}

package cgroup2_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
)

// A memory limit is written only into a cgroup's own file: a directory
// that is no cgroup's (a --cgroup that names another), or a memory.max
// that links elsewhere, is refused and nothing is written.
func TestSetMemoryLimitOnlyInACgroup(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep\n"), 0o644)
	plain := filepath.Join(dir, "plain")
	os.Mkdir(plain, 0o755)
	os.WriteFile(filepath.Join(plain, "memory.max"), []byte("max\n"), 0o644)
	linked := filepath.Join(dir, "linked")
	os.Mkdir(linked, 0o755)
	os.Symlink(victim, filepath.Join(linked, "memory.max"))
	for _, tc := range []struct{ name, dir, file string }{
		{"a plain directory", plain, filepath.Join(plain, "memory.max")},
		{"a directory not a cgroup's, its memory.max a link elsewhere", linked, victim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(tc.file)
			err := cgroup2.SetMemoryLimit(tc.dir, 1<<30)
			if err == nil || !strings.Contains(err.Error(), "not a cgroup's directory") || !strings.Contains(err.Error(), tc.dir) {
				t.Errorf("SetMemoryLimit(%s) = %v; want a refusal naming it", tc.dir, err)
			}
			if after, _ := os.ReadFile(tc.file); string(after) != string(before) {
				t.Errorf("%s was written: %q, was %q", tc.file, after, before)
			}
		})
	}
}

package local

import (
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The result is the last non-empty line, however much came before it.
func TestLastLine(t *testing.T) {
	long := strings.Repeat("x", 2<<20)
	for _, c := range []struct{ out, want string }{
		{"", ""},
		{`{"a":1}`, `{"a":1}`},
		{"progress\n{\"a\":1}\n", `{"a":1}`},
		{"progress\n{\"a\":1}\r\n\n  \n", `{"a":1}`},
		{long + "\n{\"b\":2}\n", `{"b":2}`},
	} {
		path := filepath.Join(t.TempDir(), "stdout.log")
		os.WriteFile(path, []byte(c.out), 0o644)
		got, err := lastLine(path)
		if err != nil || string(got) != c.want {
			t.Errorf("lastLine(%.40q) = %.40q, %v; want %q", c.out, got, err, c.want)
		}
	}
}

// A work directory under one the sub-agent's uid cannot traverse is
// refused naming that directory and the fix.
func TestReachable(t *testing.T) {
	// Not t.TempDir: its parent is 0700.
	base, err := os.MkdirTemp("", "airlock-reachable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	closed := filepath.Join(base, "closed")
	os.MkdirAll(filepath.Join(closed, "task", "work"), 0o755)
	os.Chmod(closed, 0o700)
	err = reachable(filepath.Join(closed, "task", "work"))
	if err == nil || !strings.Contains(err.Error(), closed+" is mode -rwx------") || !strings.Contains(err.Error(), "chmod o+x "+closed) {
		t.Fatalf("reachable under a 0700 dir = %v; want it named with the fix", err)
	}
	os.Chmod(closed, 0o711)
	if err := reachable(filepath.Join(closed, "task", "work")); err != nil {
		t.Fatalf("reachable under 0711 dirs = %v", err)
	}
}

// A job's sandbox carries the kind's pin, for the sandbox to check on the
// file it execs.
func TestSpecCarriesThePin(t *testing.T) {
	pin := strings.Repeat("a", 64)
	j := spawn.Job{ID: "t1", Kind: &kind.Kind{Name: "k", Binary: "/bin/true", SHA256: pin, Preset: "reviewer"}, Dir: "/d", Work: "/d/work"}
	if sp := (Substrate{}).spec(j); sp.SHA256 != pin || sp.Command[0] != "/bin/true" {
		t.Fatalf("spec = %+v; want the kind's pin on its binary", sp)
	}
}

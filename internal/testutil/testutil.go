// Package testutil carries the test policy shared by every package: what a
// missing tool or privilege does. In CI (AIRLOCK_REQUIRE_PRIVILEGED=1) it
// fails the test; elsewhere it skips it, naming what is missing.
package testutil

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
)

// Required reports whether missing prerequisites fail rather than skip.
func Required() bool { return os.Getenv("AIRLOCK_REQUIRE_PRIVILEGED") == "1" }

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("AIRLOCK_REQUIRE_PRIVILEGED=1: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireTool returns the path of a command-line tool the test runs.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, "test needs %s (CI installs it; see .ci/run): %v", name, err)
	}
	return p
}

// RequireRoot requires uid 0 for a test of namespaces, uid switches or
// cgroups, naming the feature.
func RequireRoot(t testing.TB, feature string) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "test of %s needs root", feature)
	}
}

// RequireFeature requires a kernel or host feature the test is about;
// err says why it is missing (nil: present).
func RequireFeature(t testing.TB, feature string, err error) {
	t.Helper()
	if err != nil {
		missing(t, "test needs %s: %v", feature, err)
	}
}

// RequireCgroup2 returns where the cgroup v2 hierarchy is mounted.
func RequireCgroup2(t testing.TB) string {
	t.Helper()
	mnt, err := cgroup2.Mount()
	if err != nil {
		missing(t, "test needs a cgroup v2 hierarchy: %v", err)
	}
	return mnt
}

// FreePort is a TCP port on 127.0.0.1 nothing listens on now, for a server
// the test starts as another process (which must bind it itself).
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitFor polls cond, backing off from 1ms to 100ms, until it holds; after
// 20s the test fails naming what it waited for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for d := time.Millisecond; !cond(); d = min(2*d, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(d)
	}
}

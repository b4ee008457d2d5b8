package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The demo pod writes nothing in a --state-dir another user may write
// (as root, it would write where their links point): refused first.
func TestDemoRefusesAnotherUsersStateDir(t *testing.T) {
	testutil.RequireRoot(t, "a directory of another user's")
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, 65534, 65534)
	d, err := newDemoPod(dir, slog.Default())
	if err == nil {
		d.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "--state-dir") {
		t.Fatalf("demo pod in another user's directory: %v; want it refused", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Fatalf("the demo wrote %d files there before refusing", len(entries))
	}
}

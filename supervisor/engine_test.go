package supervisor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/presets"
)

// A watch that ends after the start, its bundle directory gone for good,
// is told to WatchEnded (the pod's critical policy_watch_failed event):
// the policy serves on, and its edits no longer reload. It takes the
// policies package's wait for a directory to come back, 10s.
func TestWatchEndedIsTold(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := os.CopyFS(dir, presets.FS); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	o := PolicyOptions{Watch: true, Presets: []string{"strict"}, WatchEnded: func(err error) { ended <- err }}
	o.Source = PolicySource(dir)
	if _, err := OpenEngine(ctx, o, quiet); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "went and is not back") {
			t.Fatalf("WatchEnded told %v; want the bundle's going", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WatchEnded not told within 30s of the bundle going for good")
	}
}

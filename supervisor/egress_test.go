package supervisor

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// An egress that cannot be readied says so when it is opened, for its
// caller to refuse to start (a pod not READY, a sandbox not run), instead
// of serving nothing while the caller goes on.
func TestOpenEgressFailsUpFront(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := policies.New(context.Background(), policies.Options{Source: policies.Source{FS: presets.FS}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadOrCreate(filepath.Join(t.TempDir(), "ca"), 16)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Config{Decider: engine, CA: ca, Guard: guard, Audit: io.Discard, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	// No processes to attribute its connections to: nothing could be
	// decided for it.
	_, err = OpenEgress(px, &sandbox.Network{}, proxy.Sandbox{ID: "nobody", Preset: "strict"})
	if err == nil || !strings.Contains(err.Error(), "sandbox nobody") {
		t.Fatalf("OpenEgress of a sandbox with no candidate processes = %v; want an error naming it", err)
	}
}

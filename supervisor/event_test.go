package supervisor

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// An event's detail, much of it a service's (its health answer's status
// line, its last output), is clipped: a line of megabytes would rotate the
// earlier events out of the log and stop a reader at its buffer's end.
func TestEventDetailIsClipped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := events.Open(path, events.Options{MaxBytes: 1 << 20, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := &Pod{events: l, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p.event("boot_step", events.Info, "", "earlier")
	p.event("health", events.Critical, "shim", "GET http://127.0.0.1:8080/healthz: 500 "+strings.Repeat("x", 8<<20))
	got, err := events.Read(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Detail != "earlier" {
		t.Fatalf("events after an 8 MiB detail: %d, the first %q; want the earlier one kept", len(got), got[0].Detail)
	}
	if d := got[1].Detail; len(d) > maxDetail+32 || !strings.HasPrefix(d, "GET http://127.0.0.1:8080/healthz: 500 xxx") || !strings.HasSuffix(d, "bytes)") {
		t.Fatalf("the 8 MiB detail as written: %d bytes, %q…; want it clipped to %d, saying so", len(d), d[:min(len(d), 60)], maxDetail)
	}
}

// An ingress listening beyond loopback is said (plain HTTP: keys in the
// clear); on loopback, in any spelling, it is not.
func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.2": true, "::1": true, "localhost": true,
		"0.0.0.0": false, "::": false, "10.0.0.5": false, "": false, "gateway.test": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v; want %v", host, got, want)
		}
	}
}

package supervisor

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/prometheus/client_golang/prometheus"
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

// An event the events file does not take is counted, in the pod's status
// and its metrics: said in the log alone, the pod would look healthy with
// its inbox silent.
func TestEventFailuresAreCounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, l *events.Log, path string)
	}{
		{"a directory in its place", func(t *testing.T, _ *events.Log, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"closed", func(t *testing.T, l *events.Log, _ string) { l.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			l, err := events.Open(path, events.Options{MaxBytes: 1 << 20, Keep: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p := &Pod{m: &manifest.Pod{Name: "p"}, events: l, log: slog.New(slog.DiscardHandler)}
			if p.metrics, err = newPodMetrics(p); err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(p.metrics.eventsFailed); err != nil {
				t.Fatal(err)
			}
			counted := func() (status, metric float64) {
				mfs, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				metric = -1
				for _, mf := range mfs {
					if mf.GetName() == "airlock_pod_events_failed_total" && len(mf.GetMetric()) == 1 {
						metric = mf.GetMetric()[0].GetCounter().GetValue()
					}
				}
				return float64(p.Status().EventsFailed), metric
			}
			p.event("boot_step", events.Info, "", "recorded")
			if s, m := counted(); s != 0 || m != 0 {
				t.Fatalf("after an event recorded: status %v, metric %v failed; want 0", s, m)
			}
			tc.spoil(t, l, path)
			p.event("health", events.Critical, "shim", "not recorded")
			p.event("health", events.Critical, "shim", "nor this")
			if s, m := counted(); s != 2 || m != 2 {
				t.Errorf("after 2 events not recorded: status %v, metric %v failed; want 2", s, m)
			}
		})
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

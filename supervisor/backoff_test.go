package supervisor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

func TestBackoffGrowsToItsCapAndResets(t *testing.T) {
	b := backoff{initial: 100 * time.Millisecond, max: time.Second, mult: 2}
	var got []time.Duration
	for range 6 {
		got = append(got, b.delay())
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	b.reset()
	if d := b.delay(); d != 100*time.Millisecond {
		t.Errorf("after reset: %v, want the initial delay", d)
	}
}

// A product past time.Duration's range is the cap, never a negative delay
// (no delay at all), however large the cap and the multiplier.
func TestBackoffNeverOverflows(t *testing.T) {
	b := backoff{initial: 200 * time.Millisecond, max: 1<<63 - 1, mult: 100, jitter: 1}
	for i := range 20 {
		if d := b.delay(); d <= 0 {
			t.Fatalf("delay %d = %v; want a positive one", i, d)
		}
	}
}

func TestBackoffJitterStaysInItsBand(t *testing.T) {
	b := backoff{initial: time.Second, max: time.Second, mult: 2, jitter: 0.2}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b.delay()
		if d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("delay %v outside 1s ±20%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d distinct delays in 200: the jitter does not spread them", len(seen))
	}
}

func TestCrashLoopCountsWithinTheWindow(t *testing.T) {
	c := crashLoop{max: 3, window: time.Minute}
	t0 := time.Unix(0, 0)
	for i, tc := range []struct {
		at     time.Duration
		giveUp bool
	}{
		{0, false}, {time.Second, false}, {2 * time.Second, false},
		{3 * time.Second, true}, // a fourth within the minute
	} {
		if got := c.restart(t0.Add(tc.at)); got != tc.giveUp {
			t.Fatalf("restart %d at %v: give up %v, want %v", i, tc.at, got, tc.giveUp)
		}
	}
	c = crashLoop{max: 3, window: time.Minute}
	for i := range 10 {
		// One every 30s: never more than two within a minute.
		if c.restart(t0.Add(time.Duration(i) * 30 * time.Second)) {
			t.Fatalf("restart %d given up on, though spaced out", i)
		}
	}
}

func TestLineWriterPrefixesWholeLines(t *testing.T) {
	var out bytes.Buffer
	w := &lineWriter{prefix: "svc", w: &out}
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\nthree"))
	if got, want := out.String(), "[svc] one\n[svc] two\n"; got != want {
		t.Errorf("got %q, want %q (an unfinished line waits)", got, want)
	}
	out.Reset()
	w.Write([]byte(strings.Repeat("x", maxLine)))
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.HasPrefix(out.String(), "[svc] three") {
		t.Errorf("a line past %d bytes is passed on in a piece: %d lines", maxLine, n)
	}
}

func TestDependencyOrder(t *testing.T) {
	svc := func(name string, after ...string) manifest.Service { return manifest.Service{Name: name, After: after} }
	for _, tc := range []struct {
		name  string
		svcs  []manifest.Service
		want  string
		error string
	}{
		{"independent keep their order", []manifest.Service{svc("a"), svc("b")}, "a b", ""},
		{"after comes after", []manifest.Service{svc("gateway", "shim"), svc("shim")}, "shim gateway", ""},
		{"a chain", []manifest.Service{svc("c", "b"), svc("b", "a"), svc("a")}, "a b c", ""},
		{"a cycle is named", []manifest.Service{svc("a", "b"), svc("b", "a")}, "", "a → b → a"},
		{"an unknown name", []manifest.Service{svc("a", "nosuch")}, "", `"nosuch"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dependencyOrder(tc.svcs)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("error %v, want one naming %s", err, tc.error)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Errorf("order %v (%v), want %s", got, err, tc.want)
			}
		})
	}
}

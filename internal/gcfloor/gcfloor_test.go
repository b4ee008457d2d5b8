package gcfloor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	const busy = 1 << 30 // a second's allocation that collects often at the default
	for _, c := range []struct {
		name                            string
		live, scanned, perSecond, floor uint64
		want                            int
	}{
		{"small heap: the goal is the floor", 8 * mib, 8 * mib, busy, 64 * mib, 700},
		{"stacks count: the goal is still the floor", 8 * mib, 16 * mib, busy, 64 * mib, 350},
		{"not yet measured: the default", 0, 0, busy, 64 * mib, defaultPercent},
		{"at rest: the default", 8 * mib, 8 * mib, 8 * mib, 64 * mib, defaultPercent},
		{"the rate not known: the default", 8 * mib, 8 * mib, 0, 64 * mib, defaultPercent},
		{"half the floor: the default", 32 * mib, 32 * mib, busy, 64 * mib, defaultPercent},
		{"stacks making up the floor's half: the default", 16 * mib, 48 * mib, busy, 64 * mib, defaultPercent},
		{"above the floor: the default", 200 * mib, 200 * mib, busy, 64 * mib, defaultPercent},
		{"just under half: a little more than the default", 30 * mib, 30 * mib, busy, 64 * mib, 113},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := percent(c.live, c.scanned, c.perSecond, c.floor); got != c.want {
				t.Errorf("percent(%d, %d, %d, %d) = %d, want %d", c.live, c.scanned, c.perSecond, c.floor, got, c.want)
			}
		})
	}
}

// The floor is kept in a process of its own, so that the test's own
// process and its GOGC stay as they were.
func TestKeep(t *testing.T) {
	for _, c := range []struct {
		name string
		env  string
		// GOGC allocating fast with a small live heap; then once that
		// stopped, with no collection asked for; at rest; allocating
		// fast with 48 MiB live; and the first's goal.
		wantBusy, wantQuiet, wantRest, wantLarge int
		wantGoal                                 func(goal uint64) bool
	}{
		{"floor kept while busy", "", 1000, defaultPercent, defaultPercent, defaultPercent, func(g uint64) bool { return g >= 60<<20 }},
		{"operator's GOGC stands", "GOGC=200", 200, 200, 200, 200, func(g uint64) bool { return g < 32<<20 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = []string{"GCFLOOR_CHILD=1"} // no GOGC or GOMEMLIMIT of the test's
			if c.env != "" {
				cmd.Env = append(cmd.Env, c.env)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			var busy, quiet, rest, large int
			var goal uint64
			if _, err := fmt.Sscanf(string(out), "busy=%d goal=%d quiet=%d rest=%d large=%d", &busy, &goal, &quiet, &rest, &large); err != nil {
				t.Fatalf("child's report %q: %v", out, err)
			}
			if busy < c.wantBusy {
				t.Errorf("GOGC allocating fast with a small live heap: %d, want %d or more", busy, c.wantBusy)
			}
			if !c.wantGoal(goal) {
				t.Errorf("heap goal allocating fast with a small live heap: %d MiB", goal>>20)
			}
			if quiet != c.wantQuiet {
				t.Errorf("GOGC once the allocation stopped, with no collection asked for: %d, want %d", quiet, c.wantQuiet)
			}
			if rest != c.wantRest {
				t.Errorf("GOGC at rest: %d, want %d", rest, c.wantRest)
			}
			if large != c.wantLarge {
				t.Errorf("GOGC with 48 MiB live: %d, want %d", large, c.wantLarge)
			}
		})
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("GCFLOOR_CHILD") == "1" {
		keepAndReport()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// garbage is where allocations go to be dropped.
var garbage []byte

// keepAndReport keeps a 64 MiB floor and reports GOGC (and the heap goal)
// after collections that each follow 32 MiB of allocation, with a small
// live heap; 2.6 s after that, with a few small allocations and no
// collection asked for by the test; after collections with nothing
// allocated between them; and after collections that each follow 32 MiB
// of allocation, with 48 MiB live.
func keepAndReport() {
	Keep(64 << 20)
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/goal:bytes"}}
	collect := func(busy bool) {
		// Each collection finalizes a sentinel; the tuning it does
		// applies from the next one.
		for range 3 {
			if busy {
				for range 32 << 10 {
					garbage = make([]byte, 1<<10)
				}
			} else {
				time.Sleep(300 * time.Millisecond)
			}
			runtime.GC()
			runtime.Gosched()
		}
		metrics.Read(s)
	}
	collect(true)
	fmt.Printf("busy=%d goal=%d ", s[0].Value.Uint64(), s[1].Value.Uint64())
	// At rest is not silent: a few small allocations a second (a
	// pod's health probes), which must not raise the floor again.
	for range 13 {
		garbage = make([]byte, 512)
		time.Sleep(200 * time.Millisecond)
	}
	metrics.Read(s)
	fmt.Printf("quiet=%d ", s[0].Value.Uint64())
	collect(false)
	fmt.Printf("rest=%d ", s[0].Value.Uint64())
	live := make([]byte, 48<<20)
	collect(true)
	fmt.Printf("large=%d\n", s[0].Value.Uint64())
	runtime.KeepAlive(live)
}

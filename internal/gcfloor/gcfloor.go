// Package gcfloor keeps the garbage collector's heap goal from falling
// below a floor while the live heap is small and the process allocates
// fast.
//
// A proxy's live heap is a few MiB, and under load it allocates at every
// request (net/http's and TLS's buffers, headers, the audit line): with
// Go's default GOGC=100 the goal is twice the live heap, so it collects
// dozens of times a second, ~13% of its CPU per plain request. A floor of
// a few tens of MiB makes that a few times a second and bounds what it
// costs in memory to the floor. It applies only while collecting at the
// default would come more often than once a second (at rest, Go's default
// returns the memory as before), and only while the live heap is under
// half the floor (under many connections memory grows as it would
// without it). A process whose load stops makes no collection for up to
// two minutes (the runtime's forced one), which would leave the floor's
// garbage held all that time: a second without a collection, the rate is
// looked at again, and a process come to rest collects at once.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// defaultPercent is Go's own GOGC, below which the floor never goes.
const defaultPercent = 100

var once sync.Once

// Keep holds the heap goal at floor bytes or more for the life of the
// process while it allocates fast, adjusted after each collection to the
// live heap it found and the rate of allocation since the one before. An
// operator's GOGC (or GOGC=off) in the environment stands instead: Keep
// does nothing then. Only the first call takes effect.
func Keep(floor uint64) {
	once.Do(func() {
		if os.Getenv("GOGC") != "" {
			return
		}
		t := &tuner{floor: floor, sample: []metrics.Sample{{Name: metricLive}, {Name: metricStacks}, {Name: metricGlobals}, {Name: metricAllocs}}}
		t.quiet = time.AfterFunc(time.Hour, t.check)
		t.tune()
		t.arm()
	})
}

// What the collector's goal is made of: the live heap, plus GOGC percent
// of the live heap, the goroutines' stacks and the globals it scans; and
// the bytes allocated since the process began.
const (
	metricLive    = "/gc/heap/live:bytes"
	metricStacks  = "/gc/scan/stack:bytes"
	metricGlobals = "/gc/scan/globals:bytes"
	metricAllocs  = "/gc/heap/allocs:bytes"
)

// quietAfter is how long the floor stays raised with no collection before
// check looks at the rate again.
const quietAfter = time.Second

type tuner struct {
	floor uint64
	// mu orders the finalizer's tune and the timer's check.
	mu     sync.Mutex
	sample []metrics.Sample
	// The allocation count and the time when the rate was last measured
	// (Keep, a collection, a check), and what the default lets the heap
	// grow by at the last collection.
	allocs  uint64
	at      time.Time
	scanned uint64
	// quiet runs check while the floor is raised; rested, that check
	// found the process at rest and forced the collection that tunes
	// next.
	quiet  *time.Timer
	rested bool
}

// sentinel is garbage from birth: its finalizer runs once the collection
// that found it unreachable has ended, which is when the live heap is known.
// It is larger than the tiny allocator's 16 bytes so that it is freed on its own.
type sentinel struct{ _ [32]byte }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		t.tune()
		t.arm()
	})
}

func (t *tuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	live, scanned, perSecond := t.measure()
	t.scanned = scanned
	p := percent(live, scanned, perSecond, t.floor)
	if t.rested {
		// The collection check forced: its rate is over the moment it
		// took, and the allocation counter moves when a collection
		// flushes the per-CPU caches, so a second's small allocations at
		// rest would read as a rate that raises the floor again.
		t.rested = false
		p = defaultPercent
	}
	debug.SetGCPercent(p)
	if p > defaultPercent {
		t.quiet.Reset(quietAfter)
	} else {
		t.quiet.Stop()
	}
}

// check runs when the floor has been raised a while with no collection:
// still busy, it looks again later; come to rest, Go's default applies
// and the garbage under the floor is collected now (a lower goal alone
// starts no collection until the next allocation of a span).
func (t *tuner) check() {
	t.mu.Lock()
	_, _, perSecond := t.measure()
	busy := perSecond > t.scanned
	if busy {
		t.quiet.Reset(quietAfter)
	} else {
		debug.SetGCPercent(defaultPercent)
		t.rested = true
	}
	t.mu.Unlock()
	if !busy {
		runtime.GC() // its sentinel tunes again, at the default
	}
}

// measure reads the live heap, what the default lets the heap grow by
// (the live heap, the stacks and the globals), and the bytes allocated
// per second since it last measured.
func (t *tuner) measure() (live, scanned, perSecond uint64) {
	metrics.Read(t.sample)
	var v [4]uint64
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	live, stacks, globals, allocs := v[0], v[1], v[2], v[3]
	now := time.Now()
	if elapsed := now.Sub(t.at); !t.at.IsZero() && elapsed > 0 && allocs > t.allocs {
		perSecond = uint64(float64(allocs-t.allocs) / elapsed.Seconds())
	}
	t.allocs, t.at = allocs, now
	return live, live + stacks + globals, perSecond
}

// percent is the GOGC that puts the heap goal, live + scanned × GOGC/100
// (scanned: the live heap, the stacks and the globals), at floor for a
// process allocating perSecond bytes a second; Go's default when that
// already collects at most once a second (the default lets the heap grow
// by scanned), when nothing is measured yet, and never below it.
func percent(live, scanned, perSecond, floor uint64) int {
	if scanned == 0 || perSecond <= scanned || floor <= live+scanned {
		return defaultPercent
	}
	return int((floor - live) * 100 / scanned)
}

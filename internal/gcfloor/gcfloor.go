// Package gcfloor keeps the garbage collector's heap goal from falling
// below a floor while the live heap is small.
//
// A proxy's live heap is a few MiB, and it allocates at every request
// (net/http's and TLS's buffers, headers, the audit line): with Go's
// default GOGC=100 the goal is twice the live heap, so it collects dozens
// of times a second under load, ~15% of its CPU per plain request. A floor
// of a few tens of MiB makes that a few times a second and bounds what it
// costs in memory to the floor; once the live heap is half the floor or
// more, the default applies unchanged, so memory under many connections
// grows as it would without the floor.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultPercent is Go's own GOGC, below which the floor never goes.
const DefaultPercent = 100

var once sync.Once

// Keep holds the heap goal at floor bytes or more for the life of the
// process, adjusted after each collection to the live heap it found. An
// operator's GOGC (or GOGC=off) in the environment stands instead: Keep
// does nothing then. Only the first call takes effect.
func Keep(floor uint64) {
	once.Do(func() {
		if os.Getenv("GOGC") != "" {
			return
		}
		t := &tuner{floor: floor, sample: []metrics.Sample{{Name: liveHeap}, {Name: stacks}, {Name: globals}}}
		t.tune()
		t.arm()
	})
}

// What the collector's goal is made of: the live heap, plus GOGC percent
// of the live heap, the goroutines' stacks and the globals it scans.
const (
	liveHeap = "/gc/heap/live:bytes"
	stacks   = "/gc/scan/stack:bytes"
	globals  = "/gc/scan/globals:bytes"
)

type tuner struct {
	floor  uint64
	sample []metrics.Sample
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
	metrics.Read(t.sample)
	var v [3]uint64
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	debug.SetGCPercent(Percent(v[0], v[0]+v[1]+v[2], t.floor))
}

// Percent is the GOGC that puts the heap goal, live + scanned × GOGC/100
// (scanned: the live heap, the stacks and the globals), at floor, and never
// below Go's default. A heap not yet measured (0, before the first
// collection) counts as 4 MiB, about what a process starts with.
func Percent(live, scanned, floor uint64) int {
	if live == 0 {
		live = 4 << 20
	}
	scanned = max(scanned, live)
	if floor <= live+scanned {
		return DefaultPercent
	}
	return int((floor - live) * 100 / scanned)
}

// Package flood bounds the lines a stream of refusals writes into a log:
// up to Max one by one per interval, the rest counted by key and summed up
// in one line per key when the interval ends. A flood of refused requests
// would otherwise write tens of thousands of lines a second into a log
// others share, and fill its disk.
package flood

import (
	"sync"
	"time"
)

// Counter is one source's count of refusals. An interval begins with the
// first refusal after the last one ended.
type Counter[K comparable] struct {
	Interval time.Duration
	Max      int // lines written one by one per interval
	// Summarise writes the line summing up n refusals of key k that
	// were not written one by one.
	Summarise func(k K, n int64)

	mu      sync.Mutex
	lines   int         // written one by one in this interval
	skipped map[K]int64 // refusals beyond them
	timer   *time.Timer // ends the interval; nil between intervals
	// failed is why the last line written one by one could not be (nil
	// when it was, or when the operator chose to serve without the log).
	failed error
}

// Admit says whether a refusal's line is written one by one; if not, it
// is counted for the summary, and err is why the log failed its last line:
// while it fails, a refusal beyond the lines fails as its own line would,
// not answered on the promise of a summary that could not be written
// either.
func (f *Counter[K]) Admit(k K) (write bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer == nil {
		f.lines, f.failed = 0, nil
		f.timer = time.AfterFunc(f.Interval, f.end)
	}
	if f.lines < f.Max {
		f.lines++
		return true, nil
	}
	if f.skipped == nil {
		f.skipped = map[K]int64{}
	}
	f.skipped[k]++
	return false, f.failed
}

// Wrote records the outcome of a line written one by one.
func (f *Counter[K]) Wrote(err error) {
	f.mu.Lock()
	f.failed = err
	f.mu.Unlock()
}

// end closes the interval and writes its summary lines, if any.
func (f *Counter[K]) end() {
	f.mu.Lock()
	skipped := f.skipped
	f.skipped, f.timer = nil, nil
	f.mu.Unlock()
	for k, n := range skipped {
		f.Summarise(k, n)
	}
}

// Flush ends the running interval now, when its source has stopped.
func (f *Counter[K]) Flush() {
	f.mu.Lock()
	running := f.timer != nil && f.timer.Stop()
	f.mu.Unlock()
	if running {
		f.end()
	}
}

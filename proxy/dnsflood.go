package proxy

import (
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// A sandbox's DNS refusals are written one by one up to maxDNSLines per
// dnsFloodInterval; past that they are counted, and summed up in one line
// per rcode and reason when the interval ends. A flood of queries would
// otherwise write tens of thousands of lines a second into the audit log
// every sandbox shares, each under its lock. Every refusal is still
// counted in the metrics as it is answered.
const maxDNSLines = 64

// dnsFloodInterval is a variable for the tests, which need an interval
// that cannot end before they look.
var dnsFloodInterval = time.Second

type dnsFloodKey struct {
	rcode  string
	reason policies.Reason
}

// dnsFlood is one ServeDNS's count. An interval begins with the first
// refusal after the last one ended.
type dnsFlood struct {
	interval  time.Duration
	summarise func(dnsFloodKey, int64)

	mu      sync.Mutex
	lines   int                   // written one by one in this interval
	skipped map[dnsFloodKey]int64 // refusals beyond them
	timer   *time.Timer           // ends the interval; nil between intervals
	// failed is why the last line written one by one could not be (nil
	// when it was, or when the operator chose to serve without the log).
	failed error
}

// admit says whether a refusal's line is written one by one; if not, it
// is counted for the summary, and err is why the log failed its last line:
// while it fails, a refusal beyond the lines fails as its own line would
// (SERVFAIL), not answered on the promise of a summary that could not be
// written either.
func (f *dnsFlood) admit(k dnsFloodKey) (write bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer == nil {
		f.lines, f.failed = 0, nil
		f.timer = time.AfterFunc(f.interval, f.end)
	}
	if f.lines < maxDNSLines {
		f.lines++
		return true, nil
	}
	if f.skipped == nil {
		f.skipped = map[dnsFloodKey]int64{}
	}
	f.skipped[k]++
	return false, f.failed
}

// wrote records the outcome of a line written one by one.
func (f *dnsFlood) wrote(err error) {
	f.mu.Lock()
	f.failed = err
	f.mu.Unlock()
}

// end closes the interval and writes its summary lines, if any.
func (f *dnsFlood) end() {
	f.mu.Lock()
	skipped := f.skipped
	f.skipped, f.timer = nil, nil
	f.mu.Unlock()
	for k, n := range skipped {
		f.summarise(k, n)
	}
}

// flush ends the running interval now, when its server has stopped.
func (f *dnsFlood) flush() {
	f.mu.Lock()
	running := f.timer != nil && f.timer.Stop()
	f.mu.Unlock()
	if running {
		f.end()
	}
}

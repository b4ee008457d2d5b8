package main

import (
	"testing"
	"time"
)

// The loads against the bench's own origins, with no proxy: each returns
// (a download whose body is endless must not wait for its end) with its
// operations counted and the CPU window read.
func TestLoadsDirect(t *testing.T) {
	up := shortLoads(t)
	r, _ := startDirect("", up)
	checkLoads(t, r, up, "plain,tunnels,https,tlsbulk,bulk,mitm")
}

// shortLoads makes the loads brief, for the test only, and starts the
// origins.
func shortLoads(t *testing.T) *upstreams {
	t.Helper()
	d, c := *duration, *conc
	t.Cleanup(func() { *duration, *conc = d, c })
	*duration, *conc = 200*time.Millisecond, 2
	up, err := startUpstreams(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return up
}

// checkLoads runs the loads of scenarios through r: each must end, with
// operations and no error.
func checkLoads(t *testing.T, r *running, up *upstreams, scenarios string) {
	t.Helper()
	for _, p := range paths {
		if !listed(scenarios, p.scenario) {
			continue
		}
		t.Run(p.scenario+"/"+p.rate, func(t *testing.T) {
			win := &window{}
			done := make(chan result, 1)
			go func() { done <- p.load(r, up, win) }()
			var res result
			select {
			case res = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s: still running a minute after a %v measurement", p.rate, *duration)
			}
			if res.err != nil || res.ops == 0 {
				t.Fatalf("%s: %d ops in %v, error %v; want some, no error", p.rate, res.ops, res.elapsed, res.err)
			}
			if p.perMB && res.bytes == 0 {
				t.Errorf("%s: no bytes read", p.rate)
			}
			if win.endsCPU <= 0 {
				t.Errorf("%s: the window read no CPU for the ends (%v)", p.rate, win.endsCPU)
			}
		})
	}
}

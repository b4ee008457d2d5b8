package main

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// A shim's kill, as `airlock watchdog shim --interval 1s` wrote it, then
// the lines a sample must not be read from.
const (
	shimFound     = `{"ts":"2026-11-23T18:30:01.000000000Z","source":"watchdog-shim","kind":"shim_dead","severity":"warning","service":"shim","detail":"GET http://127.0.0.1:41479/v1/models: connection refused: nothing listens on its port","recovered":false}`
	shimRecovered = `{"ts":"2026-11-23T18:30:01.215000000Z","source":"watchdog-shim","kind":"restart","severity":"info","service":"shim","detail":"after shim_dead: healthy again 215ms after the fault was found","recovered":true}`
	shimFailed    = `{"ts":"2026-11-23T18:30:03.000000000Z","source":"watchdog-shim","kind":"restart","severity":"critical","service":"shim","detail":"after shim_dead: restarted, but not healthy within 30s","recovered":false}`
	shimGaveUp    = `{"ts":"2026-11-23T18:30:01.000000000Z","source":"watchdog-shim","kind":"give_up","severity":"critical","service":"shim","detail":"shim_dead: 3 restarts in 30m0s already","recovered":false}`
	shimHung      = `{"ts":"2026-11-23T18:30:01.000000000Z","source":"watchdog-shim","kind":"shim_hung","severity":"warning","service":"shim","detail":"GET http://127.0.0.1:41479/v1/models: no answer in 500ms","recovered":false}`
)

func TestWdSplit(t *testing.T) {
	fault := time.Date(2026, 11, 23, 18, 30, 0, 20_000_000, time.UTC)
	for _, c := range []struct {
		name  string
		lines []string
		want  wdSample
		done  bool
		err   string // in the error; "" for none
	}{
		{name: "no line yet"},
		{name: "found, not yet restarted", lines: []string{shimFound}},
		{name: "recovered", lines: []string{shimFound, shimRecovered}, done: true,
			want: wdSample{detect: 980 * time.Millisecond, recover: 215 * time.Millisecond}},
		{name: "restart failed", lines: []string{shimFound, shimFailed}, err: "restart (critical): after shim_dead: restarted, but not healthy"},
		{name: "gave up", lines: []string{shimFound, shimGaveUp}, err: "give_up (critical)"},
		{name: "another fault found", lines: []string{shimHung, shimRecovered}, err: "found shim_hung, want shim_dead"},
		{name: "a restart with no finding", lines: []string{shimRecovered}, err: "restart with no finding"},
		{name: "a second finding before the restart", lines: []string{shimFound, shimFound}, err: "shim_dead after the finding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var evs []events.Event
			if len(c.lines) > 0 {
				evs = parseEvents(t, strings.Join(c.lines, "\n"))
			}
			s, done, err := wdSplit(evs, fault, "shim_dead")
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("wdSplit: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("wdSplit error = %v, want one saying %q", err, c.err)
			}
			if s != c.want || done != c.done {
				t.Errorf("wdSplit = %+v, done %v; want %+v, done %v", s, done, c.want, c.done)
			}
		})
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

func TestTargetJudge(t *testing.T) {
	for _, tc := range []struct {
		t               target
		airlock, peer   float64
		wantRatio       float64
		wantMet         bool
		wantDescription string
	}{
		{target{row: httpsPath.rate, vs: "squid", factor: 1.1}, 2200, 2000, 1.1, true, "≥ 1.1x squid"},
		{target{row: httpsPath.rate, vs: "squid", factor: 1.1}, 2100, 2000, 1.05, false, "≥ 1.1x squid"},
		// Times and costs: lower is better, the target a ceiling.
		{target{row: tunnelPath.cpu, vs: "squid", factor: 1}, 345, 478, 345.0 / 478, true, "≤ 1x squid"},
		{target{row: tunnelPath.p99, vs: "squid", factor: 1}, 478, 345, 478.0 / 345, false, "≤ 1x squid"},
		{target{row: tlsBulkPath.ends, vs: "squid", factor: 1}, 1356, 1356, 1, true, "≤ 1x squid"},
		// Against another row of the peer's.
		{target{row: inspectedPath.rate, vs: "squid", vsRow: httpsPath.rate, factor: 0.7}, 9839, 19518, 9839.0 / 19518, false,
			"≥ 0.7x squid's HTTPS keep-alive req/s"},
		{target{row: inspectedNewPath.rate, vs: "mitmproxy", factor: 5}, 1000, 194, 1000.0 / 194, true, "≥ 5x mitmproxy"},
	} {
		ratio, met := tc.t.judge(tc.airlock, tc.peer)
		if ratio != tc.wantRatio || met != tc.wantMet {
			t.Errorf("%v judge(%v, %v) = %v, %v; want %v, %v", tc.t, tc.airlock, tc.peer, ratio, met, tc.wantRatio, tc.wantMet)
		}
		if got := tc.t.String(); got != tc.wantDescription {
			t.Errorf("target %+v reads %q; want %q", tc.t, got, tc.wantDescription)
		}
	}
}

// Every target names rows that some path fills, for columns that measure
// them: a misspelt row would print "not measured" for ever.
func TestTargetsNameMeasuredRows(t *testing.T) {
	serves := map[string]string{}
	for _, p := range proxies {
		serves[p.name] = p.serves
	}
	for _, tg := range targets {
		for who, row := range map[string]string{"airlock": tg.row, tg.vs: tg.peerRow()} {
			s := scenarioOf(row)
			if s == "" {
				t.Errorf("target %v: no path fills row %q", tg, row)
			} else if !listed(serves[who], s) {
				t.Errorf("target %v: %s does not take part in scenario %q, which fills %q", tg, who, s, row)
			}
		}
	}
}

func TestCell(t *testing.T) {
	tb := newTable()
	tb.add(httpsPath.rate, "airlock", 3)
	tb.add(httpsPath.rate, "airlock", 1)
	tb.add(httpsPath.rate, "airlock", 2)
	tb.add(httpsPath.p99, "squid", 1500)
	tb.fail(httpsPath.p99, "squid")
	tb.fail(httpsPath.rate, "tinyproxy")
	for _, tc := range []struct{ row, proxy, want string }{
		{httpsPath.rate, "airlock", "2"},
		{httpsPath.p99, "squid", "1500 µs*"}, // one round of two failed
		{httpsPath.rate, "tinyproxy", "error"},
		{httpsPath.rate, "go-relay", "-"},
	} {
		if got := tb.cell(tc.row, tc.proxy); got != tc.want {
			t.Errorf("cell(%q, %q) = %q, want %q", tc.row, tc.proxy, got, tc.want)
		}
	}
}

func TestInMicros(t *testing.T) {
	for _, p := range paths {
		if inMicros(p.rate) {
			t.Errorf("rate row %q read as µs (lower is better)", p.rate)
		}
		for _, row := range []string{p.p50, p.p99, p.cpu, p.ends} {
			if row != "" && !inMicros(row) {
				t.Errorf("row %q not read as µs (lower is better)", row)
			}
		}
	}
}

func TestStartVerdict(t *testing.T) {
	bwrap := 15 * time.Millisecond
	for _, tc := range []struct {
		name        string
		wall, bwrap time.Duration
		wantTarget  string
		met, ok     bool
	}{
		{"airlock launch --net none", 30 * time.Millisecond, bwrap, "≤ 2x bwrap (30.0 ms)", true, true},
		{"airlock launch --net none", 82 * time.Millisecond, bwrap, "≤ 2x bwrap (30.0 ms)", false, true},
		{"airlock launch --net none", 82 * time.Millisecond, 0, "≤ 2x bwrap", false, false}, // bwrap not measured
		{"airlock launch --pod-socket (join a pod)", 49 * time.Millisecond, bwrap, "≤ 50ms", true, true},
		{"airlock launch --pod-socket (join a pod)", 51 * time.Millisecond, bwrap, "≤ 50ms", false, true},
		{"airlock launch --net proxy --preset strict", 194 * time.Millisecond, bwrap, "", false, false},
	} {
		target, met, ok := startVerdict(tc.name, tc.wall, tc.bwrap)
		if target != tc.wantTarget || met != tc.met || ok != tc.ok {
			t.Errorf("startVerdict(%q, %v, %v) = %q, %v, %v; want %q, %v, %v", tc.name, tc.wall, tc.bwrap, target, met, ok, tc.wantTarget, tc.met, tc.ok)
		}
		if strings.Contains(target, "%!") {
			t.Errorf("target %q badly formatted", target)
		}
	}
}

package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// path is one way through a proxy, its load, and the rows it fills: its
// rate, the latency percentiles, the proxy's own CPU per operation (or per
// MB), read from /proc — what it costs, apart from how the machine's two
// vCPUs are shared — and the ends' (the bench process: the clients and
// the origins), which a relay in the path raises too. "" for no such row.
type path struct {
	scenario                  string
	load                      func(r *running, up *upstreams, w *window) result
	rate, p50, p99, cpu, ends string
	perMB                     bool // the rate in MB/s, the CPU rows per MB
}

// The inspected rows' host: airlock's rule for it inspects, and the
// origin's certificate names it.
const mitmHost = "mitm.bench"

var (
	plainPath = path{scenario: "plain",
		load: func(r *running, up *upstreams, w *window) result { return plainKeepAlive(w, r.addr, up.plainURL) },
		rate: "plain keep-alive req/s", p50: "plain p50 latency", p99: "plain p99 latency",
		cpu: "proxy CPU per plain req"}
	tunnelPath = path{scenario: "tunnels",
		load: func(r *running, up *upstreams, w *window) result {
			return newTunnels(w, r.addr, up.tlsAddr, "127.0.0.2", up.roots)
		},
		rate: "new CONNECT+TLS tunnels/s", p50: "new tunnel p50 latency", p99: "new tunnel p99 latency",
		cpu: "proxy CPU per new tunnel", ends: "ends' CPU per new tunnel"}
	httpsPath = path{scenario: "https",
		load: func(r *running, up *upstreams, w *window) result {
			return tlsKeepAlive(w, r.addr, up.tlsAddr, "127.0.0.2", up.roots)
		},
		rate: "HTTPS keep-alive req/s", p50: "HTTPS keep-alive p50 latency", p99: "HTTPS keep-alive p99 latency",
		cpu: "proxy CPU per HTTPS req", ends: "ends' CPU per HTTPS req"}
	tlsBulkPath = path{scenario: "tlsbulk",
		load: func(r *running, up *upstreams, w *window) result {
			return tlsBulk(w, r.addr, up.tlsAddr, "127.0.0.2", up.roots)
		},
		rate: "TLS bulk MB/s", cpu: "proxy CPU per MB TLS bulk", ends: "ends' CPU per MB TLS bulk", perMB: true}
	rawBulkPath = path{scenario: "bulk",
		load: func(r *running, up *upstreams, w *window) result { return rawBulk(w, r.addr, up.bulkAddr) },
		rate: "raw CONNECT bulk MB/s (no TLS)", cpu: "proxy CPU per MB raw bulk", ends: "ends' CPU per MB raw bulk", perMB: true}
	inspectedNewPath = path{scenario: "mitm",
		load: func(r *running, _ *upstreams, w *window) result {
			return newTunnels(w, r.addr, r.inspectTarget, mitmHost, r.inspectRoots)
		},
		rate: "inspected new conns/s", p50: "inspected new p50 latency", p99: "inspected new p99 latency",
		cpu: "proxy CPU per inspected conn"}
	inspectedPath = path{scenario: "mitm",
		load: func(r *running, _ *upstreams, w *window) result {
			return tlsKeepAlive(w, r.addr, r.inspectTarget, mitmHost, r.inspectRoots)
		},
		rate: "inspected keep-alive req/s", p50: "inspected keep-alive p50", p99: "inspected keep-alive p99",
		cpu: "proxy CPU per inspected req"}
)

var paths = []path{plainPath, tunnelPath, httpsPath, tlsBulkPath, rawBulkPath, inspectedNewPath, inspectedPath}

// scenarioOf names the scenario whose path fills row.
func scenarioOf(row string) string {
	for _, p := range paths {
		for _, r := range p.rows() {
			if r == row {
				return p.scenario
			}
		}
	}
	return ""
}

func (p path) rows() []string {
	var out []string
	for _, r := range []string{p.rate, p.p50, p.p99, p.cpu, p.ends} {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}

// inMicros marks the rows measured in µs, where lower is better.
func inMicros(row string) bool {
	return strings.Contains(row, "latency") || strings.Contains(row, " p50") || strings.Contains(row, " p99") || strings.Contains(row, "CPU per")
}

// target is one of issue 16's targets: airlock's median of row against a
// peer's median of vsRow (row when empty), in the same run.
type target struct {
	row, vs, vsRow string
	factor         float64
}

var targets = []target{
	{row: plainPath.rate, vs: "squid", factor: 1.2},
	{row: plainPath.p99, vs: "squid", factor: 1},
	{row: tunnelPath.rate, vs: "squid", factor: 1.1},
	{row: tunnelPath.cpu, vs: "squid", factor: 1},
	{row: tunnelPath.p99, vs: "squid", factor: 1},
	{row: httpsPath.rate, vs: "squid", factor: 1.1},
	{row: httpsPath.p99, vs: "squid", factor: 1},
	{row: tlsBulkPath.rate, vs: "squid", factor: 1.1},
	{row: tlsBulkPath.ends, vs: "squid", factor: 1},
	{row: inspectedNewPath.rate, vs: "mitmproxy", factor: 5},
	{row: inspectedNewPath.p99, vs: "squid", vsRow: tunnelPath.p99, factor: 1},
	{row: inspectedPath.rate, vs: "mitmproxy", factor: 15},
	{row: inspectedPath.rate, vs: "squid", vsRow: httpsPath.rate, factor: 0.7},
	{row: inspectedPath.p99, vs: "squid", vsRow: httpsPath.p99, factor: 1},
}

func (t target) peerRow() string {
	if t.vsRow != "" {
		return t.vsRow
	}
	return t.row
}

// judge is airlock's figure over the peer's, and whether it meets the
// target: a rate must reach factor × the peer's, a time or a cost (the µs
// rows) stay within it.
func (t target) judge(airlock, peer float64) (ratio float64, met bool) {
	ratio = airlock / peer
	if inMicros(t.row) {
		return ratio, ratio <= t.factor
	}
	return ratio, ratio >= t.factor
}

func (t target) String() string {
	op := "≥"
	if inMicros(t.row) {
		op = "≤"
	}
	peer := t.vs
	if t.vsRow != "" {
		peer += "'s " + t.vsRow
	}
	return fmt.Sprintf("%s %gx %s", op, t.factor, peer)
}

// table holds one value per round for each row and proxy, and how many
// rounds failed.
type table struct {
	samples map[string]map[string][]float64
	errs    map[string]map[string]int
}

func newTable() *table {
	return &table{samples: map[string]map[string][]float64{}, errs: map[string]map[string]int{}}
}

func (t *table) add(row, proxy string, v float64) {
	if t.samples[row] == nil {
		t.samples[row] = map[string][]float64{}
	}
	t.samples[row][proxy] = append(t.samples[row][proxy], v)
}

func (t *table) fail(row, proxy string) {
	if t.errs[row] == nil {
		t.errs[row] = map[string]int{}
	}
	t.errs[row][proxy]++
}

// median of the rounds that did not fail; NaN when none.
func (t *table) median(row, proxy string) float64 {
	v := t.samples[row][proxy]
	if len(v) == 0 {
		return math.NaN()
	}
	return median(v)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// cell is a row's median for one proxy: "-" when not measured, "error"
// when every round failed, marked * when some did.
func (t *table) cell(row, proxy string) string {
	m, n := t.median(row, proxy), t.errs[row][proxy]
	switch {
	case math.IsNaN(m) && n > 0:
		return "error"
	case math.IsNaN(m):
		return "-"
	}
	s := fmt.Sprintf("%.0f", m)
	if inMicros(row) {
		s += " µs"
	}
	if n > 0 {
		s += "*"
	}
	return s
}

// print writes the table, airlock's ratios to each other column, then
// issue 16's targets, each with its ratio and whether it is met.
func (t *table) print(w io.Writer, cols []string) {
	fmt.Fprintf(w, "\n%-32s", fmt.Sprintf("median of %d rounds", *rounds))
	for _, c := range cols {
		fmt.Fprintf(w, " %11s", c)
	}
	var others []string
	for _, c := range cols {
		if c != "airlock" {
			others = append(others, c)
			fmt.Fprintf(w, " %11s", "÷"+strings.TrimSuffix(c, "proxy"))
		}
	}
	fmt.Fprintln(w)
	for _, p := range paths {
		if !wanted(p.scenario) {
			continue
		}
		for _, row := range p.rows() {
			fmt.Fprintf(w, "%-32s", row)
			for _, c := range cols {
				fmt.Fprintf(w, " %11s", t.cell(row, c))
			}
			for _, o := range others {
				a, b := t.median(row, "airlock"), t.median(row, o)
				if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
					fmt.Fprintf(w, " %11s", "-")
					continue
				}
				fmt.Fprintf(w, " %10.2fx", a/b)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "(loopback, %d clients, %s per measurement; ÷X: airlock's median over X's; latency and CPU rows: lower is better, so a ratio below 1 means airlock is faster or cheaper; * some rounds failed, stderr says why)\n", *conc, *duration)

	fmt.Fprintf(w, "\n%-32s %-52s %9s  %s\n", "issue 16's targets", "target", "airlock÷", "verdict")
	for _, tg := range targets {
		if !listed(*only, "airlock") || !listed(*only, tg.vs) || !wanted(scenarioOf(tg.row)) || !wanted(scenarioOf(tg.peerRow())) {
			continue
		}
		a, b := t.median(tg.row, "airlock"), t.median(tg.peerRow(), tg.vs)
		if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
			fmt.Fprintf(w, "%-32s %-52s %9s  %s\n", tg.row, tg, "-", "not measured")
			continue
		}
		ratio, met := tg.judge(a, b)
		verdict := "met"
		if !met {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "%-32s %-52s %8.2fx  %s\n", tg.row, tg, ratio, verdict)
	}
}

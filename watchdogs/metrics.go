package watchdogs

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Metrics are one watchdog's Prometheus metrics, served on /metrics by a
// daemon (Handler) or written for node_exporter's textfile collector by a
// one-shot run (WriteTextfile). Plug Observe into Watchdog.Observe.
//
// They are built from Counts at each collection rather than kept in
// client_golang's counters: a one-shot run is a fresh process, and its
// counters, the histogram's buckets with them, must go on from where the
// run before left them in the state file.
type Metrics struct {
	registry *prometheus.Registry
	descs    metricDescs

	mu     sync.Mutex
	counts Counts
	last   *round // nil before the first round: no gauge claims anything yet
}

// Counts are a watchdog's counters, kept in the state file (State.Metrics)
// so that one-shot runs keep counting: a process starting from zero at
// every run would make rate() see nothing but resets.
type Counts struct {
	Rounds   map[string]uint64 `json:"rounds,omitempty"`   // by outcome
	Faults   map[string]uint64 `json:"faults,omitempty"`   // by kind
	Restarts map[string]uint64 `json:"restarts,omitempty"` // by result: recovered, failed
	GaveUp   uint64            `json:"gave_up,omitempty"`
	Recovery RecoveryHistogram `json:"recovery"`
	// GivenUp is the state's GaveUp as of the last count: gave_up_total
	// counts its rises, the give_up lines.
	GivenUp bool `json:"given_up,omitempty"`
}

func (c Counts) clone() Counts {
	c.Rounds, c.Faults, c.Restarts = maps.Clone(c.Rounds), maps.Clone(c.Faults), maps.Clone(c.Restarts)
	c.Recovery.Buckets = slices.Clone(c.Recovery.Buckets)
	return c
}

// RecoveryHistogram is recovery_seconds' state: the count and sum of
// observations and, for each of recoveryBuckets, how many were at most
// its bound.
type RecoveryHistogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []uint64 `json:"buckets,omitempty"` // cumulative, one per bound
}

// recoveryBuckets span a watchdog's recoveries: a restarted shim answers
// in well under a second, a Node gateway takes seconds to boot, and
// --settle (30s by default) bounds the rest.
var recoveryBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120}

// round is what the gauges say: the last round's.
type round struct {
	at                        time.Time
	up, givenUp               bool
	strikes, restartsInWindow int
}

// outcomeLabels are the outcome label's values, one per Outcome: "gave
// up" would be the only value with a space.
var outcomeLabels = [...]string{"healthy", "suspect", "recovered", "failed", "gave_up", "blind"}

type metricDescs struct {
	rounds, faults, restarts, gaveUpTotal           *prometheus.Desc
	lastRound, up, strikes, inWindow, givenUp, took *prometheus.Desc
}

// NewMetrics makes the metrics of the watchdog whose inbox source is
// source ("watchdog-shim") watching service ("shim"): both are labels on
// every metric, so the watchdogs of one host, in one scrape or one
// textfile directory, stay apart.
func NewMetrics(source, service string) *Metrics {
	labels := prometheus.Labels{"source": source, "service": service}
	desc := func(name, help string, vary ...string) *prometheus.Desc {
		return prometheus.NewDesc("airlock_watchdog_"+name, help, vary, labels)
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		descs: metricDescs{
			rounds:      desc("rounds_total", "Rounds (probe, and recovery when needed), by outcome: healthy, suspect (a timeout short of hung), recovered, failed, gave_up, blind (the probe could not look).", "outcome"),
			faults:      desc("faults_total", "Faults found, by kind (shim_dead, shim_hung, gateway_heap_oom, ...); past the budget each round counts the fault again.", "kind"),
			restarts:    desc("restarts_total", "Restarts, by result: recovered (healthy again within --settle) or failed.", "result"),
			gaveUpTotal: desc("gave_up_total", "Times the watchdog gave up (the critical give_up line): the restart budget was spent."),
			// A watchdog that stopped running (a timer disabled, a
			// daemon wedged) says nothing else: alert on its age.
			lastRound: desc("last_round_timestamp_seconds", "When the last round ended, in seconds since the epoch."),
			up:        desc("up", "1 when the last round found the service healthy or recovered it, else 0."),
			strikes:   desc("strikes", "Probe timeouts in a row, short of a fault (hung after --hung-after)."),
			inWindow:  desc("restarts_in_window", "Restarts in the budget's window as of the last round: the watchdog gives up at --max-restarts."),
			givenUp:   desc("given_up", "1 when the last round gave up: the service is down and nothing restarts it until a restart leaves the window."),
			took:      desc("recovery_seconds", "Time from a fault's finding to the service's first healthy probe after its restart."),
		},
	}
	m.registry.MustRegister(collector{m})
	return m
}

// Observe counts a round and sets the gauges from its result and the state
// after it; it is a Watchdog.Observe. The counters go on from those the
// state holds (a one-shot run's, kept by the run before) and are put back
// in it, to be saved with it.
func (m *Metrics) Observe(res Result, st *State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.Metrics != nil {
		m.counts = st.Metrics.clone()
		if h := &m.counts.Recovery; h.Count > 0 && len(h.Buckets) != len(recoveryBuckets) {
			// Kept by a version with other buckets: start the histogram
			// afresh, a reset rate() understands, rather than misplace them.
			*h = RecoveryHistogram{}
		}
	}
	c := &m.counts
	add(&c.Rounds, outcomeLabels[res.Outcome])
	switch res.Outcome {
	case Recovered:
		add(&c.Faults, res.Kind)
		add(&c.Restarts, "recovered")
		c.Recovery.observe(res.Took.Seconds())
	case Failed:
		add(&c.Faults, res.Kind)
		add(&c.Restarts, "failed")
	case GaveUp:
		add(&c.Faults, res.Kind)
	}
	if st.GaveUp && !c.GivenUp {
		c.GaveUp++
	}
	c.GivenUp = st.GaveUp
	kept := c.clone()
	st.Metrics = &kept
	m.last = &round{
		at:               time.Now(),
		up:               res.Outcome == Healthy || res.Outcome == Recovered,
		givenUp:          res.Outcome == GaveUp,
		strikes:          st.Strikes,
		restartsInWindow: len(st.Restarts),
	}
}

func add(m *map[string]uint64, key string) {
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[key]++
}

func (h *RecoveryHistogram) observe(v float64) {
	if len(h.Buckets) != len(recoveryBuckets) {
		h.Buckets = make([]uint64, len(recoveryBuckets))
	}
	h.Count++
	h.Sum += v
	for i, le := range recoveryBuckets {
		if v <= le {
			h.Buckets[i]++
		}
	}
}

// collector is m as a prometheus.Collector, kept out of Metrics' API.
type collector struct{ *Metrics }

// Describe is prometheus.Collector's.
func (m collector) Describe(ch chan<- *prometheus.Desc) {
	d := m.descs
	for _, desc := range []*prometheus.Desc{d.rounds, d.faults, d.restarts, d.gaveUpTotal, d.lastRound, d.up, d.strikes, d.inWindow, d.givenUp, d.took} {
		ch <- desc
	}
}

// Collect is prometheus.Collector's: the counts, and the gauges once a
// round has set them.
func (m collector) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, c := m.descs, &m.counts
	counter := func(desc *prometheus.Desc, v uint64, label ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), label...)
	}
	// Every outcome and result from the start, at 0: a series that first
	// appears at 1 shows no increase.
	for _, o := range outcomeLabels {
		counter(d.rounds, c.Rounds[o], o)
	}
	for _, r := range []string{"recovered", "failed"} {
		counter(d.restarts, c.Restarts[r], r)
	}
	for kind, n := range c.Faults {
		counter(d.faults, n, kind)
	}
	counter(d.gaveUpTotal, c.GaveUp)
	buckets := make(map[float64]uint64, len(recoveryBuckets))
	for i, le := range recoveryBuckets {
		if i < len(c.Recovery.Buckets) {
			buckets[le] = c.Recovery.Buckets[i]
		} else {
			buckets[le] = 0
		}
	}
	ch <- prometheus.MustNewConstHistogram(d.took, c.Recovery.Count, c.Recovery.Sum, buckets)
	if m.last == nil {
		return
	}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	gauge(d.lastRound, float64(m.last.at.UnixNano())/1e9)
	gauge(d.up, bit(m.last.up))
	gauge(d.givenUp, bit(m.last.givenUp))
	gauge(d.strikes, float64(m.last.strikes))
	gauge(d.inWindow, float64(m.last.restartsInWindow))
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Handler serves the metrics (GET /metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// WriteTextfile writes the metrics in the text exposition format to path,
// a *.prom file in node_exporter's textfile collector directory, whole
// (durable.WriteFile): the collector never reads half a file. It is 0644, as the
// collector runs as its own user; the temporary file's name does not end
// in .prom, so the collector skips it.
func (m *Metrics) WriteTextfile(path string) error {
	mfs, err := m.registry.Gather()
	if err != nil {
		return fmt.Errorf("watchdog metrics %s: %w", path, err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			return fmt.Errorf("watchdog metrics %s: %w", path, err)
		}
	}
	if err := durable.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("watchdog metrics: %w", err)
	}
	return nil
}

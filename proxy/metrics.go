package proxy

import (
	"net/http"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the proxy's Prometheus metrics. Labels are bounded: sandbox
// ids are the listeners the operator configured (and the one-off sandboxes
// of a pod while they run: Forget drops them), reasons a fixed set. A nil
// *Metrics records nothing.
type Metrics struct {
	registry  *prometheus.Registry
	decisions *prometheus.CounterVec
	tunnels   *prometheus.GaugeVec
	bytes     *prometheus.CounterVec
	scrubbed  *prometheus.CounterVec
	identity  prometheus.Histogram
	eval      prometheus.Histogram
	audit     prometheus.Counter
	dns       *prometheus.CounterVec

	// open counts each sandbox's tunnels, and forgetting holds those
	// Forget was asked to drop while some were open, under mu: a tunnel
	// can outlive its sandbox's processes (a half-close waits for the
	// upstream), and what it records at its end would bring the series
	// back, its gauge at -1, for the pod's life.
	mu         sync.Mutex
	open       map[string]int
	forgetting map[string]bool
}

// NewMetrics registers the proxy's metrics, including the CA's leaf cache.
func NewMetrics(ca *certs.CA) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		registry: r, open: map[string]int{}, forgetting: map[string]bool{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_proxy_decisions_total", Help: "Decisions by sandbox, decision and reason.",
		}, []string{"sandbox", "decision", "reason"}),
		tunnels: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "airlock_proxy_active_tunnels", Help: "Open CONNECT tunnels (opaque and inspected).",
		}, []string{"sandbox"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_proxy_bytes_total", Help: "Bytes relayed, up (client to upstream) and down.",
		}, []string{"sandbox", "direction"}),
		scrubbed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_proxy_secrets_scrubbed_total", Help: "Injected secrets masked in responses (an upstream echoed them).",
		}, []string{"sandbox"}),
		identity: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_proxy_identity_lookup_seconds", Help: "Time to attribute a connection to a process.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14),
		}),
		eval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_proxy_policy_eval_seconds", Help: "Time to decide one question.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 16),
		}),
		audit: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_proxy_audit_write_errors_total", Help: "Audit lines that could not be written (each also logged on stderr).",
		}),
		dns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_proxy_dns_answers_total", Help: "DNS replies the sandbox's answerer sent, by sandbox and rcode (NOERROR, NXDOMAIN, REFUSED, SERVFAIL, FORMERR, NOTIMP).",
		}, []string{"sandbox", "rcode"}),
	}
	// The runtime's and the process's own figures (go_goroutines,
	// process_resident_memory_bytes, process_open_fds): a leak of
	// connections shows there first.
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.MustRegister(m.decisions, m.tunnels, m.bytes, m.scrubbed, m.identity, m.eval, m.audit, m.dns,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "airlock_proxy_cert_cache_hits_total", Help: "Leaf certificates served from the cache."},
			func() float64 { h, _ := ca.CacheStats(); return float64(h) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "airlock_proxy_cert_cache_misses_total", Help: "Leaf certificates signed."},
			func() float64 { _, mi := ca.CacheStats(); return float64(mi) }),
	)
	return m
}

// Handler serves /metrics.
// Register adds collectors of what the proxy serves (a pod's services) to
// the same registry, so one /metrics shows both.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Forget drops every series of a sandbox that has ended for good (a pod's
// one-off sandbox), so that a long-lived pod's /metrics does not grow by
// one set of series per sandbox it ever ran: at once, or when the last of
// its tunnels ends.
func (m *Metrics) Forget(sandbox string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[sandbox] > 0 {
		m.forgetting[sandbox] = true
		return
	}
	m.drop(sandbox)
}

// Keep cancels a Forget still waiting on an open tunnel: the id serves a
// sandbox again (a pod's one-off id reused while the last one's tunnel
// lingers), whose series the last tunnel's end must not drop, its gauge
// among them, counting the new sandbox's tunnels by then.
func (m *Metrics) Keep(sandbox string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.forgetting, sandbox)
	m.mu.Unlock()
}

// drop deletes sandbox's series.
func (m *Metrics) drop(sandbox string) {
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.decisions, m.tunnels, m.bytes, m.scrubbed, m.dns} {
		v.DeletePartialMatch(prometheus.Labels{"sandbox": sandbox})
	}
}

func (m *Metrics) countDecision(sandbox, decision, reason string) {
	if m != nil {
		m.decisions.WithLabelValues(sandbox, decision, reason).Inc()
	}
}

func (m *Metrics) countDNS(sandbox, rcode string) {
	if m != nil {
		m.dns.WithLabelValues(sandbox, rcode).Inc()
	}
}

func (m *Metrics) auditFailed() {
	if m != nil {
		m.audit.Inc()
	}
}

func (m *Metrics) addBytes(sandbox string, up, down int64) {
	if m != nil && (up > 0 || down > 0) {
		m.bytes.WithLabelValues(sandbox, "up").Add(float64(up))
		m.bytes.WithLabelValues(sandbox, "down").Add(float64(down))
	}
}

func (m *Metrics) countScrubbed(sandbox string, n int64) {
	if m != nil && n > 0 {
		m.scrubbed.WithLabelValues(sandbox).Add(float64(n))
	}
}

// tunnelOpen counts a tunnel of sandbox opened (delta 1) or ended (-1);
// the end is the last thing a tunnel records.
func (m *Metrics) tunnelOpen(sandbox string, delta int) {
	if m == nil {
		return
	}
	m.tunnels.WithLabelValues(sandbox).Add(float64(delta))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[sandbox] += delta; m.open[sandbox] > 0 {
		return
	}
	delete(m.open, sandbox)
	if m.forgetting[sandbox] {
		delete(m.forgetting, sandbox)
		m.drop(sandbox)
	}
}

func (m *Metrics) observeIdentity(d time.Duration) {
	if m != nil {
		m.identity.Observe(d.Seconds())
	}
}

func (m *Metrics) observeEval(d time.Duration) {
	if m != nil {
		m.eval.Observe(d.Seconds())
	}
}

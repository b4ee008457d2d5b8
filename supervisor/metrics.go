package supervisor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// podMetrics are the pod's Prometheus metrics, served with the proxy's on
// one /metrics. Labels are bounded: the manifest's services and the fixed
// states.
type podMetrics struct {
	state    *prometheus.GaugeVec
	restarts *prometheus.CounterVec
	health   *prometheus.HistogramVec
	uptime   prometheus.GaugeFunc
	// eventsFailed is Pod.eventsFailed.
	eventsFailed prometheus.CounterFunc
}

var allStates = []string{statePending, stateStarting, stateHealthy, stateUnhealthy, stateBackoff, stateExited, stateGivenUp, stateStopped}

func newPodMetrics(p *Pod) (*podMetrics, error) {
	return &podMetrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "airlock_service_state", Help: "1 for the state each service is in, 0 for the others.",
		}, []string{"service", "state"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_service_restarts_total", Help: "Restarts of each service.",
		}, []string{"service"}),
		health: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_service_health_check_seconds", Help: "Health check latency, by service and result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"service", "result"}),
		uptime: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "airlock_pod_uptime_seconds", Help: "Time since the pod began to boot.",
		}, func() float64 { return time.Since(p.booted).Seconds() }),
		eventsFailed: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "airlock_pod_events_failed_total", Help: "Events the events file did not take (each in the supervisor's log).",
		}, func() float64 { return float64(p.eventsFailed.Load()) }),
	}, nil
}

func (m *podMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.state, m.restarts, m.health, m.uptime, m.eventsFailed}
}

func (m *podMetrics) setState(service, state string) {
	if m == nil {
		return
	}
	for _, s := range allStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.state.WithLabelValues(service, s).Set(v)
	}
}

func (m *podMetrics) restarted(service string) {
	if m != nil {
		m.restarts.WithLabelValues(service).Inc()
	}
}

func (m *podMetrics) observeHealth(service string, d time.Duration, ok bool) {
	if m == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "fail"
	}
	m.health.WithLabelValues(service, result).Observe(d.Seconds())
}

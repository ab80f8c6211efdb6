package handler

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts pool writes. Create it once per process and register it
// with the manager's registry; a nil *Metrics counts nothing.
type Metrics struct {
	attempts  *prometheus.CounterVec
	conflicts *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nmstate_ippool_allocation_attempts_total",
			Help: "Pool status writes attempted to allocate addresses, by pool.",
		}, []string{"pool"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nmstate_ippool_allocation_conflicts_total",
			Help: "Pool status writes refused because another writer changed the pool first, by pool.",
		}, []string{"pool"}),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.attempts, m.conflicts}
}

func (m *Metrics) attempt(pool string) {
	if m != nil {
		m.attempts.WithLabelValues(pool).Inc()
	}
}

func (m *Metrics) conflict(pool string) {
	if m != nil {
		m.conflicts.WithLabelValues(pool).Inc()
	}
}

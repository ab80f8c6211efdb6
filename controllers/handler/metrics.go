package handler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolmetrics"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
)

// Metrics counts pool writes: the allocations a self-allocating handler
// attempts and their conflicts, and every status write under the names
// the pool controller uses too (poolmetrics.Writes). Create it once per
// process and register it with the manager's registry; a nil *Metrics
// counts nothing.
type Metrics struct {
	attempts  *prometheus.CounterVec
	conflicts *prometheus.CounterVec
	writes    *poolmetrics.Writes
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
		writes: poolmetrics.NewWrites(),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.attempts, m.conflicts}, m.writes.Collectors()...)
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

// count has w report its writes to m.
func (m *Metrics) count(w *poolwrite.Writer) {
	if m != nil {
		w.OnConflict = m.conflict
		m.writes.Count(w)
	}
}

package pool

import (
	"github.com/prometheus/client_golang/prometheus"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// Metrics exports, per pool, its size and use and what the controller did
// to it. Create it once per process and register its collectors; a nil
// *Metrics exports nothing.
type Metrics struct {
	size, allocated, free *prometheus.GaugeVec
	kept                  *prometheus.GaugeVec
	rebuilds, garbage     *prometheus.CounterVec
	servedWrites          *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"pool"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"pool"})
	}
	return &Metrics{
		size:      gauge("nmstate_ippool_size", "Addresses the pool can hand out (saturating at 2^63-1)."),
		allocated: gauge("nmstate_ippool_allocated", "Addresses of the pool handed out."),
		free:      gauge("nmstate_ippool_free", "Addresses of the pool left to hand out."),
		kept: gauge("nmstate_ippool_kept_for_return",
			"Free addresses of the pool kept for the return of deleted nodes; other nodes get them when nothing else is free."),
		rebuilds: counter("nmstate_ippool_rebuilds_total", "Rebuilds of the pool's bitmap from the enactments."),
		garbage:  counter("nmstate_ippool_garbage_collected_addresses_total", "Addresses freed because no enactment claimed them for the grace period."),
		servedWrites: counter("nmstate_ippool_controller_allocation_attempts_total",
			"Pool status writes the controller attempted to allocate for enactments whose handlers met other allocations."),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.size, m.allocated, m.free, m.kept, m.rebuilds, m.garbage, m.servedWrites}
}

func (m *Metrics) report(pool *ippoolv1.NodeIPPool) {
	if m == nil {
		return
	}
	m.size.WithLabelValues(pool.Name).Set(float64(pool.Status.Size))
	m.allocated.WithLabelValues(pool.Name).Set(float64(pool.Status.Allocated))
	m.free.WithLabelValues(pool.Name).Set(float64(pool.Status.Free))
	m.kept.WithLabelValues(pool.Name).Set(float64(len(pool.Status.KeptForReturn)))
}

func (m *Metrics) forget(pool string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.size, m.allocated, m.free, m.kept} {
		v.DeleteLabelValues(pool)
	}
	for _, v := range []*prometheus.CounterVec{m.rebuilds, m.garbage, m.servedWrites} {
		v.DeleteLabelValues(pool)
	}
}

func (m *Metrics) rebuilt(pool string) {
	if m != nil {
		m.rebuilds.WithLabelValues(pool).Inc()
	}
}

func (m *Metrics) collected(pool string, n int) {
	if m != nil {
		m.garbage.WithLabelValues(pool).Add(float64(n))
	}
}

func (m *Metrics) servedWrite(pool string) {
	if m != nil {
		m.servedWrites.WithLabelValues(pool).Inc()
	}
}

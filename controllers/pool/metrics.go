package pool

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolmetrics"
)

// Metrics exports, per pool, its size and use as its status last read
// says, its conditions, the holders waiting on it, and what the
// controller did to it. Create it once per process and register its
// collectors; a nil *Metrics exports nothing. The names follow
// Prometheus's conventions: a unit (addresses, holders) or _total, and
// the pool as a label.
type Metrics struct {
	// Waiting is shared with the claim and companion controllers, which
	// report the holders of their kinds that wait on a pool.
	Waiting *poolmetrics.Waiting
	// Writes counts this process's pool status writes.
	Writes *poolmetrics.Writes

	gauges                    *poolGauges
	rebuilds, rebuildFailures *prometheus.CounterVec
	garbage, garbageFailures  *prometheus.CounterVec
	servedWrites              *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	counter := poolmetrics.PoolCounter
	m := &Metrics{
		Waiting: poolmetrics.NewWaiting(),
		Writes:  poolmetrics.NewWrites(),
		rebuilds: counter("nmstate_ippool_rebuilds_total",
			"Rebuilds of the pool's bitmap from its holders' records."),
		rebuildFailures: counter("nmstate_ippool_rebuild_failures_total",
			"Rebuilds of the pool that failed (the pool is then UnsyncronizedIPPool and hands nothing out until one succeeds)."),
		garbage: counter("nmstate_ippool_garbage_collected_addresses_total",
			"Addresses freed because no holder recorded them for the grace period and no node carried them."),
		garbageFailures: counter("nmstate_ippool_garbage_collection_failures_total",
			"Maintenance passes of the pool that failed while something was due: unclaimed addresses to collect, "+
				"in-flight entries to revoke or quarantines to lift."),
		servedWrites: counter("nmstate_ippool_controller_allocation_attempts_total",
			"Pool status writes the controller attempted to allocate for enactments whose handlers asked for an address."),
	}
	m.gauges = &poolGauges{pools: map[string]poolFigures{}, waiting: m.Waiting}
	return m
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.gauges, m.rebuilds, m.rebuildFailures, m.garbage, m.garbageFailures, m.servedWrites},
		m.Writes.Collectors()...)
}

// counters are the per-pool counters, which report and forget cover.
func (m *Metrics) counters() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.rebuilds, m.rebuildFailures, m.garbage, m.garbageFailures, m.servedWrites}
}

// report takes pool's figures from its status, and makes its counters
// exist at zero, so that alerts reading a rate see it from the start.
func (m *Metrics) report(pool *ippoolv1.NodeIPPool) {
	if m == nil {
		return
	}
	m.gauges.set(pool)
	for _, c := range m.counters() {
		c.WithLabelValues(pool.Name)
	}
	m.Writes.Know(pool.Name)
}

func (m *Metrics) forget(pool string) {
	if m == nil {
		return
	}
	m.gauges.forget(pool)
	m.waitingEnactments(pool, nil)
	for _, c := range m.counters() {
		c.DeleteLabelValues(pool)
	}
	m.Writes.Forget(pool)
}

func (m *Metrics) rebuilt(pool string) {
	if m != nil {
		m.rebuilds.WithLabelValues(pool).Inc()
	}
}

func (m *Metrics) rebuildFailed(pool string) {
	if m != nil {
		m.rebuildFailures.WithLabelValues(pool).Inc()
	}
}

func (m *Metrics) collected(pool string, n int) {
	if m != nil {
		m.garbage.WithLabelValues(pool).Add(float64(n))
	}
}

func (m *Metrics) collectionFailed(pool string) {
	if m != nil {
		m.garbageFailures.WithLabelValues(pool).Inc()
	}
}

func (m *Metrics) servedWrite(pool string) {
	if m != nil {
		m.servedWrites.WithLabelValues(pool).Inc()
	}
}

// waitingEnactments reports the enactments waiting on pool for want of an
// address (the pool controller's share of Waiting).
func (m *Metrics) waitingEnactments(pool string, names []string) {
	if m == nil {
		return
	}
	waits := make([]poolmetrics.Wait, 0, len(names))
	for _, n := range names {
		waits = append(waits, poolmetrics.Wait{Holder: holder.ForEnactment(n).String(), Pool: pool})
	}
	m.Waiting.Replace("NodeIPPool/"+pool, waits)
}

// poolFigures is what a pool's status said when it was last read.
type poolFigures struct {
	size, allocated, free, kept, quarantined, inFlight float64
	conditions                                         []condition
}

type condition struct{ kind, status, reason string }

// poolGauges exports the figures of every pool as one consistent set: a
// scrape never sees a condition half changed.
type poolGauges struct {
	mu      sync.Mutex
	pools   map[string]poolFigures
	waiting *poolmetrics.Waiting
}

var (
	poolLabels = []string{"pool"}
	gaugeDescs = struct {
		size, allocated, free, kept, quarantined, inFlight, waiting, condition *prometheus.Desc
	}{
		size: prometheus.NewDesc("nmstate_ippool_size_addresses",
			"Addresses the pool can hand out (saturating at 2^63-1).", poolLabels, nil),
		allocated: prometheus.NewDesc("nmstate_ippool_allocated_addresses",
			"Addresses of the pool handed out.", poolLabels, nil),
		free: prometheus.NewDesc("nmstate_ippool_free_addresses",
			"Addresses of the pool left to hand out.", poolLabels, nil),
		kept: prometheus.NewDesc("nmstate_ippool_kept_for_return_addresses",
			"Free addresses of the pool kept for the return of deleted nodes; other holders get them when nothing else is free.",
			poolLabels, nil),
		quarantined: prometheus.NewDesc("nmstate_ippool_quarantined_addresses",
			"Addresses of the pool taken from their holder and kept from everyone until the holder shows them gone.", poolLabels, nil),
		inFlight: prometheus.NewDesc("nmstate_ippool_in_flight_addresses",
			"Addresses of the pool taken and not yet recorded by their holder.", poolLabels, nil),
		waiting: prometheus.NewDesc("nmstate_ippool_waiting_holders",
			"Holders of every kind (enactments, pooled policies' nodes, claims) waiting for an address the pool does not have.",
			poolLabels, nil),
		condition: prometheus.NewDesc("nmstate_ippool_status_condition",
			"The pool's conditions: 1 for each condition's current type, status and reason.",
			[]string{"pool", "type", "status", "reason"}, nil),
	}
)

func (g *poolGauges) set(pool *ippoolv1.NodeIPPool) {
	s := &pool.Status
	f := poolFigures{size: float64(s.Size), allocated: float64(s.Allocated), free: float64(s.Free),
		kept: float64(len(s.KeptForReturn)), quarantined: float64(len(s.Quarantined)), inFlight: float64(len(s.InFlight))}
	for _, c := range s.Conditions {
		f.conditions = append(f.conditions, condition{c.Type, string(c.Status), c.Reason})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pools[pool.Name] = f
}

func (g *poolGauges) forget(pool string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pools, pool)
}

// Describe implements prometheus.Collector.
func (g *poolGauges) Describe(ch chan<- *prometheus.Desc) {
	d := gaugeDescs
	for _, desc := range []*prometheus.Desc{d.size, d.allocated, d.free, d.kept, d.quarantined, d.inFlight, d.waiting, d.condition} {
		ch <- desc
	}
}

// Collect implements prometheus.Collector.
func (g *poolGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := gaugeDescs
	for name, f := range g.pools {
		for desc, v := range map[*prometheus.Desc]float64{d.size: f.size, d.allocated: f.allocated, d.free: f.free,
			d.kept: f.kept, d.quarantined: f.quarantined, d.inFlight: f.inFlight, d.waiting: float64(g.waiting.Count(name))} {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, name)
		}
		for _, c := range f.conditions {
			ch <- prometheus.MustNewConstMetric(d.condition, prometheus.GaugeValue, 1, name, c.kind, c.status, c.reason)
		}
	}
}

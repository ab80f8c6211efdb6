// Package poolmetrics holds the metrics that more than one controller
// feeds: pool status writes and their conflicts (every writer of a pool,
// handlers that self-allocate included), and the holders of every kind
// that wait on an exhausted pool (enactments, pooled policies' nodes,
// claims). The alerting rules in deploy/alerts read them; docs/alerts.md
// says what each alert means and what to do.
package poolmetrics

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
)

// Writes counts pool status writes and the conflicts among them, by pool.
// A nil *Writes counts nothing.
type Writes struct {
	writes, conflicts *prometheus.CounterVec
}

// PoolCounter returns an unregistered counter with the label pool.
func PoolCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"pool"})
}

// NewWrites returns unregistered counters.
func NewWrites() *Writes {
	return &Writes{
		writes: PoolCounter("nmstate_ippool_status_writes_total",
			"Pool status writes attempted by this process, by pool: allocations, releases, quarantines, collections and conditions."),
		conflicts: PoolCounter("nmstate_ippool_status_write_conflicts_total",
			"Pool status writes refused because another writer changed the pool first, by pool; each is retried on the fresh pool."),
	}
}

// Collectors returns the collectors to register.
func (m *Writes) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.writes, m.conflicts}
}

// Count has w report its writes and conflicts to m, after whatever
// w.OnWrite and w.OnConflict did already.
func (m *Writes) Count(w *poolwrite.Writer) {
	if m == nil {
		return
	}
	onWrite, onConflict := w.OnWrite, w.OnConflict
	w.OnWrite = func(pool string) {
		if onWrite != nil {
			onWrite(pool)
		}
		m.writes.WithLabelValues(pool).Inc()
	}
	w.OnConflict = func(pool string) {
		if onConflict != nil {
			onConflict(pool)
		}
		m.conflicts.WithLabelValues(pool).Inc()
	}
}

// Know makes pool's counters exist at zero, so that a rate over them is
// defined before its first write.
func (m *Writes) Know(pool string) {
	if m != nil {
		m.writes.WithLabelValues(pool)
		m.conflicts.WithLabelValues(pool)
	}
}

// Forget drops pool's counters (the pool is gone).
func (m *Writes) Forget(pool string) {
	if m != nil {
		m.writes.DeleteLabelValues(pool)
		m.conflicts.DeleteLabelValues(pool)
	}
}

// Waiting tracks the holders that wait for an address a pool does not
// have (every address of it taken), whatever their kind. Each controller
// replaces, after every decision, what one of its groups waits for: the
// pool controller a pool's enactments, the companion controller a pooled
// policy's nodes, the claim controller one claim. It is safe for
// concurrent use; a nil *Waiting tracks nothing.
type Waiting struct {
	mu sync.Mutex
	// groups holds, by group, its holders' waits.
	groups map[string][]Wait
}

// Wait is one holder waiting on one pool. A holder waiting on two pools
// (a pooled policy with a capture of each) waits twice.
type Wait struct {
	// Holder is the holder's name (holder.Ref.String).
	Holder string
	Pool   string
}

// NewWaiting returns an empty tracker.
func NewWaiting() *Waiting { return &Waiting{groups: map[string][]Wait{}} }

// Replace sets what the holders of group wait on. Empty, the group waits
// for nothing.
func (w *Waiting) Replace(group string, waits []Wait) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(waits) == 0 {
		delete(w.groups, group)
		return
	}
	w.groups[group] = slices.Clone(waits)
}

// Count returns how many holders wait on pool.
func (w *Waiting) Count(pool string) int { return len(w.On(pool)) }

// On returns the holders waiting on pool, sorted, each once.
func (w *Waiting) On(pool string) []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, waits := range w.groups {
		for _, wt := range waits {
			if wt.Pool == pool {
				out = append(out, wt.Holder)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

package pool

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// unclaimedBits remembers since when each set bit of one pool has been seen
// without a claim. It is memory only: a restarted controller starts its
// clocks again, which only delays collection.
type unclaimedBits struct {
	since map[uint64]time.Time
}

// observe records the offsets now set without a claim, forgets every other
// offset, and returns those unclaimed for longer than grace, sorted, and how
// long until the next one is due (0 if none is pending).
func (u *unclaimedBits) observe(unclaimed []uint64, now time.Time, grace time.Duration) (due []uint64, next time.Duration) {
	seen := make(map[uint64]time.Time, len(unclaimed))
	for _, off := range unclaimed {
		since, ok := u.since[off]
		if !ok {
			since = now
		}
		seen[off] = since
		if age := now.Sub(since); age >= grace {
			due = append(due, off)
		} else if wait := grace - age; next == 0 || wait < next {
			next = wait
		}
	}
	u.since = seen
	slices.Sort(due)
	return due, next
}

// forget drops offsets that were freed.
func (u *unclaimedBits) forget(offsets []uint64) {
	for _, off := range offsets {
		delete(u.since, off)
	}
}

// withoutEntries drops from unclaimed the offsets of in-flight and
// quarantined addresses: their entries, not garbage collection, decide when
// they are freed.
func withoutEntries(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, unclaimed []uint64) []uint64 {
	if len(pool.Status.InFlight) == 0 && len(pool.Status.Quarantined) == 0 {
		return unclaimed
	}
	out := make([]uint64, 0, len(unclaimed))
	for _, off := range unclaimed {
		ip, err := alloc.Range().IP(off)
		if err == nil && (poolstatus.InFlightOf(pool, ip.String()) != nil || poolstatus.QuarantineOf(pool, ip.String()) != nil) {
			continue
		}
		out = append(out, off)
	}
	return out
}

// collect does the due maintenance of a pool in one status write, decided
// on the API server's view of the enactments: it prunes, revokes and lifts
// entries (when holdsDue) and frees the due bits that still have no claim
// and no entry, and writes the pool's condition with them.
func (r *Reconciler) collect(ctx context.Context, pool *ippoolv1.NodeIPPool, due []uint64, holdsDue bool) error {
	enactments, err := r.enactmentsFromAPI(ctx)
	if err != nil {
		return err
	}
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return err
	}
	var work holdWork
	if holdsDue {
		if work, err = r.planHolds(ctx, pool, poolstatus.Holders(pool.Name, rng, enactments), existing(enactments)); err != nil {
			return err
		}
	}
	var freed []uint64
	var revoked, lifted []string
	err = r.writeStatus(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (availability, bool, error) {
		claims := poolstatus.Holders(p.Name, alloc.Range(), enactments)
		var changed bool
		revoked, lifted, changed = applyHolds(p, alloc, claims, work)
		freed = freeUnclaimed(p, alloc, claims, due)
		return availabilityOf(p.Name, alloc, observe(p.Name, alloc, enactments)), changed || len(freed) > 0, nil
	})
	if err != nil {
		return err
	}
	m := r.remember(pool)
	if len(work.prune) > 0 {
		m.lastPrune = r.Clock.Now()
	}
	if holdsDue && len(pool.Status.Quarantined) > 0 {
		m.lastLiftCheck = r.Clock.Now()
	}
	r.reportHolds(ctx, pool, work, revoked, lifted)
	if len(freed) == 0 {
		return nil
	}
	m.unclaimed.forget(freed)
	ips := offsetsToIPs(pool, freed)
	ctrl.LoggerFrom(ctx).Info("collected unclaimed addresses", "ips", ips, "gracePeriod", r.GracePeriod.String())
	r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, ippoolv1.ReasonGarbageCollected, "Collect",
		"Freed %s: allocated for longer than %s but recorded by no enactment", listNames(ips, 10), r.GracePeriod)
	r.Metrics.collected(pool.Name, len(freed))
	return nil
}

// freeUnclaimed releases the offsets of due that are set, unclaimed and
// held by no in-flight or quarantine entry.
func freeUnclaimed(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, claims poolstatus.Claims, due []uint64) []uint64 {
	var freed []uint64
	for _, off := range due {
		ip, err := alloc.Range().IP(off)
		if err != nil || !alloc.Has(off) || len(claims[ip]) > 0 ||
			poolstatus.InFlightOf(pool, ip.String()) != nil || poolstatus.QuarantineOf(pool, ip.String()) != nil {
			continue
		}
		_ = alloc.Release(off) // set, so releasable
		freed = append(freed, off)
	}
	return freed
}

func offsetsToIPs(pool *ippoolv1.NodeIPPool, offsets []uint64) []string {
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(offsets))
	for _, off := range offsets {
		ip, err := rng.IP(off)
		if err != nil {
			out = append(out, fmt.Sprintf("offset %d", off))
			continue
		}
		out = append(out, ip.String())
	}
	return out
}

// enactmentsFromAPI lists every enactment from the API server, for
// decisions a stale cache could get wrong.
func (r *Reconciler) enactmentsFromAPI(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	return list.Items, nil
}

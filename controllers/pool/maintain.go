package pool

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// maintenance is what one maintenance pass writes to a pool, decided
// before its one status write.
type maintenance struct {
	// holdsDue: the entries were looked at, and holds says what to do.
	holdsDue bool
	holds    holdWork
	// gcDue are the unclaimed offsets old enough to collect; carried maps
	// the addresses nodes' networks carry to the node, read after the
	// enactments when gcDue is not empty.
	gcDue   []uint64
	carried map[netip.Addr]string
	// holdFor maps the addresses nodes' networks carry (a live Node's, or
	// a deleted one's within the departure hold) to those nodes, read
	// when holds are due to free addresses and the controller holds
	// carried addresses (Reconciler.HoldCarried): an address freed while
	// another node carries it is held for that node instead.
	holdFor map[netip.Addr][]string
	// pinsDue: addresses only unrecognized IPAddresses name have clear
	// bits (poolstatus.Audit.Pinned), which the write sets.
	pinsDue bool
	// holdings are those the write's claims come from: listed from the
	// API server when entries or bits are due, else the cache's.
	holdings holdings
	// labels holds the labels of the nodes a reservation by selector may
	// be for, read before the write.
	labels map[string]map[string]string
	// reservedCarriers maps the reserved addresses nodes' networks carry
	// to those nodes, read before the write; reservedUnknown is set when
	// they could not be read, and ReservationsHonored is left as it is.
	reservedCarriers map[netip.Addr][]string
	reservedUnknown  bool
	// returnCarriers maps the addresses nodes' networks carry to those
	// nodes, read when holds are due, the controller holds carried
	// addresses and the pool keeps an address for a return
	// (returnCarriers): the write takes from those returns what another
	// node carries (returnConflicts, unreturn).
	returnCarriers map[netip.Addr][]string
}

// due reports whether the pass has entries or bits to act on.
func (mw *maintenance) due() bool { return mw.holdsDue || len(mw.gcDue) > 0 || mw.pinsDue }

// planMaintenance reads what a maintenance write needs: the enactments
// from the API server, then the holders' states, when entries or bits are
// due; the labels reservations may need.
func (r maintainer) planMaintenance(ctx context.Context, pool *ippoolv1.NodeIPPool, v view, gcDue []uint64, holdsDue bool,
	m *poolMemory) (*maintenance, error) {
	mw := &maintenance{holdsDue: holdsDue, gcDue: gcDue, holdings: v.holdings}
	if mw.due() {
		hs, err := r.holdingsFromAPI(ctx)
		if err != nil {
			return nil, err
		}
		mw.holdings = hs
	}
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return nil, err
	}
	mw.pinsDue = len(assign.Pinnable(pool, rng, v.audit.Pinned)) > 0
	owners := poolstatus.Holders(pool.Name, rng, mw.holdings.records)
	if holdsDue {
		if mw.holds, err = r.planHolds(ctx, pool, owners, existing(mw.holdings), m); err != nil {
			return nil, err
		}
		m.maintenance.lastLiftCheck = r.Clock.Now()
		if mw.holdFor, err = r.holdForCarriers(ctx, mw.holds); err != nil {
			return nil, err
		}
		mw.returnCarriers = r.returnCarriers(ctx, pool, mw.holdFor)
	}
	if len(gcDue) > 0 {
		if mw.carried, err = r.carriedAddresses(ctx); err != nil {
			return nil, err
		}
	}
	mw.labels = r.reservedForLabels(ctx, pool, rng, owners)
	if mw.reservedCarriers, err = r.reservedCarriersOf(ctx, pool, rng, mw.labels); err != nil {
		// Only ReservationsHonored needs it: it stays as it is, and the
		// rest of the pass goes on.
		ctrl.LoggerFrom(ctx).Error(err, "read which nodes carry reserved addresses")
		mw.reservedUnknown = true
	} else {
		m.maintenance.reservedCarriers.Store(conflicting(pool, rng, mw.reservedCarriers, labelsFrom(mw.labels)))
	}
	return mw, nil
}

// writeMaintenance carries out a maintenance pass in one status write, and
// tells what it freed. When nothing is due and the cached copy shows that
// no condition would change, it writes (and reads) nothing.
func (r maintainer) writeMaintenance(ctx context.Context, pool *ippoolv1.NodeIPPool, mw *maintenance) error {
	var (
		revoked, lifted, held, unreturned []string
		got                               collected
	)
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	notes := auditNotes(mw, r.GracePeriod, r.QuarantinePeriod)
	ctx = audit.WithNotes(ctx, notes)
	change := func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (conditionSet, bool, error) {
		owners := poolstatus.Holders(p.Name, alloc.Range(), mw.holdings.records)
		changed := false
		revoked, lifted, held, unreturned, got = nil, nil, nil, nil, collected{}
		if mw.holdsDue {
			revoked, lifted, held, changed = applyHolds(p, alloc, owners, mw.holds, mw.holdFor, now)
			unreturned = unreturn(p, alloc, returnConflicts(p, mw.returnCarriers), now, notes)
			changed = changed || len(unreturned) > 0
		}
		got = collectUnclaimed(p, alloc, owners, mw.gcDue, mw.carried, now)
		noteCollected(notes, alloc.Range(), mw, r.GracePeriod)
		pinned := 0
		if mw.pinsDue {
			pinned = setMissing(alloc, assign.Pinnable(p, alloc.Range(), poolstatus.AuditPool(p.Name, alloc, owners).Pinned))
		}
		return r.maintainedConditions(p, alloc, mw, owners), changed || pinned > 0 || len(got.freed)+len(got.quarantined) > 0, nil
	}
	if !mw.due() && !r.conditionsChange(pool, mw) {
		return nil
	}
	var opts []poolwrite.Option
	if !pool.DeletionTimestamp.IsZero() {
		// A pool being deleted hands nothing out: its bitmap matters no
		// more, only its entries, which it resolves even on a status
		// nobody vouched for (emptied by hand just before the deletion).
		opts = append(opts, poolwrite.Vouch(func(error) {}))
	}
	if err := r.writeStatus(ctx, pool, change, opts...); err != nil {
		return err
	}
	r.reportHolds(ctx, pool, mw.holds, revoked, lifted)
	r.reportHeldForCarriers(pool, held)
	r.reportUnreturned(pool, unreturned)
	r.reportCollected(ctx, pool, got)
	return nil
}

// auditNotes says why a maintenance write changes each address it
// planned to, for the audit trail.
func auditNotes(mw *maintenance, grace, quarantine time.Duration) audit.Notes {
	notes := audit.Notes{}
	for ip, l := range mw.holds.lift {
		notes.Set(ip, "QuarantineLifted", l.why)
	}
	for ip := range mw.holds.revoke {
		notes.Set(ip, "Revoked", fmt.Sprintf("in flight and not recorded by its holder within %s", grace))
	}
	for ip, since := range mw.holds.expire {
		notes.Set(ip, "KeptExpired", fmt.Sprintf("kept for its holder's return since %s, longer than %s", since.UTC().Format(time.RFC3339), quarantine))
	}
	for ip := range mw.holds.forget {
		notes.Forget(ip, "HolderChanged", "in flight for a holder that is gone or changed since")
	}
	return notes
}

// noteCollected says why garbage collection frees, or quarantines, the
// offsets due.
func noteCollected(notes audit.Notes, rng *ippool.Range, mw *maintenance, grace time.Duration) {
	for _, off := range mw.gcDue {
		ip, err := rng.IP(off)
		if err != nil {
			continue
		}
		evidence := fmt.Sprintf("no holder has recorded it for %s", grace)
		if node, ok := mw.carried[ip]; ok {
			evidence += "; node " + node + " still carries it"
		}
		notes.Set(ip.String(), "GarbageCollected", evidence)
	}
}

// conditionsChange reports whether the conditions a maintenance write
// would set differ from the cached pool's.
func (r maintainer) conditionsChange(pool *ippoolv1.NodeIPPool, mw *maintenance) bool {
	p := pool.DeepCopy()
	alloc, err := poolstatus.Allocator(p)
	if err != nil {
		return true
	}
	conds := r.maintainedConditions(p, alloc, mw, poolstatus.Holders(p.Name, alloc.Range(), mw.holdings.records))
	changed, _ := conds.set(p, r.Clock.Now())
	return changed
}

// maintainedConditions computes the conditions a maintenance write sets
// on p: Available; ReservationsHonored when the pool has or had
// reservations; ReleasesConfirmed when the quarantines were looked at or
// there are none.
func (r maintainer) maintainedConditions(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, mw *maintenance,
	owners poolstatus.Owners) conditionSet {
	conds := conditionSet{ippoolv1.ConditionAvailable: availabilityOf(p, alloc, viewOf(p.Name, alloc, mw.holdings))}
	if !mw.reservedUnknown && (len(p.Spec.Reservations) > 0 || meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionReservationsHonored) != nil) {
		conds[ippoolv1.ConditionReservationsHonored] = reservationsOf(p, alloc, owners, labelsFrom(mw.labels), mw.reservedCarriers)
	}
	if unrecognized := owners.Unrecognized(); len(unrecognized) > 0 ||
		meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionIPAddressesRecognized) != nil {
		conds[ippoolv1.ConditionIPAddressesRecognized] = recognitionOf(p.Name, owners, unrecognized)
	}
	if len(p.Status.Quarantined) == 0 {
		conds[ippoolv1.ConditionReleasesConfirmed] = releasesOf(nil)
	} else if mw.holdsDue {
		conds[ippoolv1.ConditionReleasesConfirmed] = releasesOf(stillOverdue(p, mw.holds.overdue))
	}
	return conds
}

// stillOverdue keeps of overdue the addresses p still quarantines.
func stillOverdue(p *ippoolv1.NodeIPPool, late map[string]overdue) map[string]overdue {
	out := map[string]overdue{}
	for ip, o := range late {
		if poolstatus.QuarantineOf(p, ip) != nil {
			out[ip] = o
		}
	}
	return out
}

// reservedForLabels reads, from the cache, the labels of the nodes that
// hold a reserved address of a reservation by label selector: what
// reservationsOf asks of them. It is read before the write, so that the
// write's mutation reads nothing.
func (r maintainer) reservedForLabels(ctx context.Context, pool *ippoolv1.NodeIPPool, rng *ippool.Range,
	owners poolstatus.Owners) map[string]map[string]string {
	valid, _ := assign.Reservations(pool, rng)
	out := map[string]map[string]string{}
	for _, res := range valid {
		if res.Node != "" {
			continue
		}
		for _, o := range owners.Recognized(res.IP) {
			if _, ok := out[o.Node]; ok || o.Node == "" {
				continue // a Cluster API claim has no node
			}
			if n, err := nodemeta.Get(ctx, r.Client, o.Node); err == nil {
				out[o.Node] = n.Labels
			} else {
				out[o.Node] = nil
			}
		}
	}
	return out
}

// reservedCarriersOf returns, by reserved address of pool, the nodes
// whose networks carry it (carriers.Carriers.Complete: live Nodes, and
// deleted ones within the departure hold), and adds to labels those of
// the carriers a reservation by selector may be for. nil for a pool
// without reservations.
func (r maintainer) reservedCarriersOf(ctx context.Context, pool *ippoolv1.NodeIPPool, rng *ippool.Range,
	labels map[string]map[string]string) (map[netip.Addr][]string, error) {
	valid, _ := assign.Reservations(pool, rng)
	if len(valid) == 0 {
		return nil, nil
	}
	c, err := r.Carried.Complete(ctx, r.APIReader, assign.Carrying{})
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr][]string{}
	for _, res := range valid {
		nodes := c.Carriers[res.IP]
		if len(nodes) == 0 {
			continue
		}
		out[res.IP] = nodes
		for _, node := range nodes {
			if _, ok := labels[node]; ok || res.Node != "" {
				continue
			}
			labels[node] = nil
			if n, err := nodemeta.Get(ctx, r.Client, node); err == nil {
				labels[node] = n.Labels
			}
		}
	}
	return out, nil
}

// conflicting returns the nodes of carriers (by reserved address of
// pool, the nodes whose networks carry it) that carry an address reserved
// for another node.
func conflicting(pool *ippoolv1.NodeIPPool, rng *ippool.Range, carriers map[netip.Addr][]string,
	nodeLabels func(string) map[string]string) *map[string]bool {
	out := map[string]bool{}
	valid, _ := assign.Reservations(pool, rng)
	for _, res := range valid {
		for _, node := range notFor(res, carriers[res.IP], nodeLabels) {
			out[node] = true
		}
	}
	return &out
}

// labelsFrom looks nodes' labels up in labels.
func labelsFrom(labels map[string]map[string]string) func(string) map[string]string {
	return func(node string) map[string]string { return labels[node] }
}

// release removes the finalizer of a pool being deleted once nothing is
// in flight and nothing quarantined but strays: every address taken from
// it is then recorded or revoked, and every released address gone from its
// holder. A stray (an address found on a node's network and recorded by no
// enactment) does not hold the pool: no record will ever release it, so it
// is never taken off, and a pool created again over its range finds it on
// the same NodeNetworkState at its rebuild and holds it again.
func (r maintainer) release(ctx context.Context, pool *ippoolv1.NodeIPPool) error {
	if len(pool.Status.InFlight) > 0 || slices.ContainsFunc(pool.Status.Quarantined, released) {
		return nil
	}
	if err := removeFinalizer(ctx, r.Client, pool, ippoolv1.FinalizerPoolEntries); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("released a deleted pool: nothing in flight or quarantined but strays",
		"strays", len(pool.Status.Quarantined))
	return nil
}

// released reports whether a quarantine is of an address a record
// released (not a stray).
func released(q ippoolv1.QuarantinedAddress) bool { return q.HolderName() != "" }

// reportCollected logs and tells of collected bits.
func (r maintainer) reportCollected(ctx context.Context, pool *ippoolv1.NodeIPPool, got collected) {
	if len(got.quarantined) > 0 {
		ctrl.LoggerFrom(ctx).Info("quarantined unclaimed addresses a node carries", "ips", got.quarantined)
		r.Recorder.Eventf(pool, audit.ListReference(pool.Name, got.quarantined), corev1.EventTypeWarning, ippoolv1.ReasonAddressQuarantined, "Collect",
			"Quarantined %s: allocated for longer than %s and recorded by no holder, but on a node's network; "+
				"freed once the node shows it gone", listNames(got.quarantined, 10), r.GracePeriod)
	}
	if len(got.freed) == 0 {
		return
	}
	r.remember(pool).maintenance.unclaimed.forget(got.freed...)
	ips := offsetsToIPs(pool, got.freed)
	ctrl.LoggerFrom(ctx).Info("collected unclaimed addresses", "ips", ips, "gracePeriod", r.GracePeriod.String())
	r.Recorder.Eventf(pool, audit.ListReference(pool.Name, ips), corev1.EventTypeNormal, ippoolv1.ReasonGarbageCollected, "Collect",
		"Freed %s: allocated for longer than %s but recorded by no holder and on no node's network", listNames(ips, 10), r.GracePeriod)
	r.Metrics.collected(pool.Name, len(got.freed))
}

// conditionSet holds the values a status write gives to conditions, by
// type; conditions it does not name are left as they are.
type conditionSet map[string]availability

// set sets the conditions on pool, and its observed generation. It reports
// whether anything changed, and which conditions transitioned.
func (cs conditionSet) set(pool *ippoolv1.NodeIPPool, now time.Time) (bool, []string) {
	changed := false
	var transitioned []string
	for _, t := range slices.Sorted(maps.Keys(cs)) {
		c, tr := setCondition(pool, t, cs[t], now)
		changed = changed || c
		if tr {
			transitioned = append(transitioned, t)
		}
	}
	if pool.Status.ObservedGeneration != pool.Generation {
		pool.Status.ObservedGeneration, changed = pool.Generation, true
	}
	return changed, transitioned
}

// removeFinalizer removes a finalizer from an object under its
// resourceVersion, if it has it.
func removeFinalizer(ctx context.Context, c client.Client, o client.Object, finalizer string) error {
	if !slices.Contains(o.GetFinalizers(), finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	o.SetFinalizers(slices.DeleteFunc(slices.Clone(o.GetFinalizers()), func(f string) bool { return f == finalizer }))
	if err := c.Patch(ctx, o, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer %s from %s: %w", finalizer, o.GetName(), err)
	}
	return nil
}

package pool

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// DefaultPruneAfter is how long a recorded address keeps its in-flight
// entry before the controller removes it (Reconciler.PruneAfter). Pruning
// is batched, so that the controller's writes do not compete with every
// allocation of a rollout; the writers that record an address prune what
// they see recorded in their own pool writes meanwhile.
const DefaultPruneAfter = 10 * time.Second

// pruneAfter returns Reconciler.PruneAfter, or its default.
func (r maintainer) pruneAfter() time.Duration {
	if r.PruneAfter <= 0 {
		return DefaultPruneAfter
	}
	return r.PruneAfter
}

// pruneWhenMany is how many recorded in-flight entries a pool carries
// before they are pruned without waiting for PruneAfter: every write of
// the pool carries them, and in a burst of thousands of holders (Cluster
// API claims, a large rollout) a status of hundreds of entries made each
// write of the burst slower than the last.
const pruneWhenMany = 64

// quarantinePoll is how often quarantined addresses are looked at while
// nothing else brings the pool back, and freshQuarantinePoll how often
// while one of them has not been looked at since its release.
const (
	quarantinePoll      = 5 * time.Second
	freshQuarantinePoll = time.Second
)

// lift is the decision to free one quarantined address, and with keep, to
// keep it for its holder's return (its Node was deleted or replaced).
type lift struct {
	since metav1.Time
	why   string
	keep  bool
	// keptSince, if set, starts the kept entry's period instead of the
	// quarantine's since.
	keptSince metav1.Time
}

// holdWork is what one maintenance write does to the entries of a pool,
// decided from a fresh read of the enactments.
type holdWork struct {
	// prune are in-flight entries whose enactment records the address.
	prune []string
	// revoke are in-flight entries left unrecorded past the grace period
	// (at once when the pool is being deleted) whose enactment the
	// controller fenced, with the token: never recorded, so never
	// applied, and freed at once.
	revoke map[string]string
	// forget are in-flight entries whose enactment is gone or changed
	// without recording them, with the token. The address may have been
	// recorded and applied since and its record just removed, with a
	// quarantine on its way: the entry goes, the bit stays, and garbage
	// collection frees it after its grace period if nothing holds it.
	forget map[string]string
	// lift are quarantined addresses to free, with why; an entry is lifted
	// only if it is still the one decided on (same since).
	lift map[string]lift
	// seen are quarantines looked at for the first time since the release,
	// with the time of the holder's network state then: the controller
	// records it, and restamps the entry's since with its own clock.
	seen map[string]metav1.Time
	// overdue are the quarantines past their period, by address.
	overdue map[string]overdue
	// ask are the nodes asked for their network state again.
	ask []string
	// expire are kept addresses whose quarantine period has passed, by
	// since: their holder no longer gets them back first.
	expire map[string]metav1.Time
}

// holdsDue returns whether the pool's entries need work now, and how long
// until the next one may. Pruning and quarantine checks are batched: at
// most one every PruneAfter and quarantinePoll, however many enactment
// events bring the pool back. The ages of in-flight entries are measured
// on the controller's clock, from when this process first saw them.
func (r maintainer) holdsDue(pool *ippoolv1.NodeIPPool, owners poolstatus.Owners, exists func(string) bool, m *poolMemory) (bool, time.Duration) {
	now := r.Clock.Now()
	var next time.Duration
	wait := func(d time.Duration) {
		if next == 0 || d < next {
			next = d
		}
	}
	due := false
	ages := m.maintenance.inFlight.see(inFlightKeys(pool), now)
	terminating := !pool.DeletionTimestamp.IsZero()
	recorded := 0
	for _, e := range pool.Status.InFlight {
		ip, err := netip.ParseAddr(e.IP)
		age := ages[inFlightKey(e)]
		switch {
		case err == nil && owners.HeldBy(ip, holder.Parse(e.HolderName())):
			if recorded++; age >= r.pruneAfter() || terminating || recorded >= pruneWhenMany {
				due = true
			} else {
				wait(r.pruneAfter() - age)
			}
		case terminating, age >= r.GracePeriod, !exists(e.HolderName()) && age >= r.pruneAfter():
			// An entry whose enactment is gone is forgotten early; the
			// cache has surely seen a young entry's enactment by then.
			due = true
		case !exists(e.HolderName()):
			wait(r.pruneAfter() - age)
		default:
			wait(r.GracePeriod - age)
		}
	}
	for _, k := range pool.Status.KeptForReturn {
		if left := r.QuarantinePeriod - now.Sub(k.Since.Time); left <= 0 {
			due = true
		} else {
			wait(left)
		}
	}
	if len(pool.Status.Quarantined) > 0 {
		// A new quarantine is looked at soon: its holder is asked for
		// evidence, and the sooner it is, the sooner the address is free
		// (but not at every event of a rollout: a quarantine beside a record
		// still being removed stays new until the record is gone).
		fresh := slices.ContainsFunc(pool.Status.Quarantined, func(q ippoolv1.QuarantinedAddress) bool { return q.StateSeenAtRelease == nil })
		poll := quarantinePoll
		if fresh {
			poll = freshQuarantinePoll
		}
		if since := now.Sub(m.maintenance.lastLiftCheck); m.maintenance.stateChanged.Swap(false) || since >= poll {
			due = true
			wait(poll)
		} else {
			wait(poll - since)
		}
	}
	return due, next
}

// inFlightKey names one in-flight entry: a new token is a new entry.
func inFlightKey(e ippoolv1.InFlightAddress) string { return e.IP + "@" + e.Token }

func inFlightKeys(pool *ippoolv1.NodeIPPool) []string {
	keys := make([]string, 0, len(pool.Status.InFlight))
	for _, e := range pool.Status.InFlight {
		keys = append(keys, inFlightKey(e))
	}
	return keys
}

// planHolds decides, on the API server's view, which entries to prune,
// forget and revoke (lifecycle.Settler, the one rule for every kind of
// holder: an entry is settled once its holder records it or is gone, or
// after the grace period, at once in a pool being deleted), which
// quarantines to lift, and which holders to ask for evidence.
func (r maintainer) planHolds(ctx context.Context, pool *ippoolv1.NodeIPPool, owners poolstatus.Owners,
	exists func(string) bool, m *poolMemory) (holdWork, error) {
	w := holdWork{revoke: map[string]string{}, forget: map[string]string{}, lift: map[string]lift{},
		seen: map[string]metav1.Time{}, overdue: map[string]overdue{}, expire: map[string]metav1.Time{}}
	now := r.Clock.Now()
	ages := m.maintenance.inFlight.see(inFlightKeys(pool), now)
	terminating := !pool.DeletionTimestamp.IsZero()
	settler := lifecycle.Settler{Client: r.Client, Reader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock, IPAMVersion: r.IPAMVersion}
	for _, e := range pool.Status.InFlight {
		ip, err := netip.ParseAddr(e.IP)
		recorded := err == nil && owners.HeldBy(ip, holder.Parse(e.HolderName()))
		if !recorded && exists(e.HolderName()) && !terminating && ages[inFlightKey(e)] < r.GracePeriod {
			continue // young: its holder records it soon
		}
		settled, err := settler.Settle(ctx, pool, lifecycle.Entry{InFlightAddress: e, Recorded: recorded, Exists: exists(e.HolderName())})
		switch {
		case err != nil:
			return holdWork{}, err
		case settled == lifecycle.Prune:
			w.prune = append(w.prune, e.IP)
		case settled == lifecycle.Forget:
			w.forget[e.IP] = e.Token
		case settled == lifecycle.Revoke:
			w.revoke[e.IP] = e.Token
		}
	}
	if err := r.planQuarantines(ctx, pool, owners, &w); err != nil {
		return holdWork{}, err
	}
	for _, k := range pool.Status.KeptForReturn {
		if now.Sub(k.Since.Time) >= r.QuarantinePeriod {
			w.expire[k.IP] = k.Since
		}
	}
	return w, nil
}

// planQuarantines judges every quarantine of pool on what the API server
// says of its holder (judgeQuarantine).
func (r maintainer) planQuarantines(ctx context.Context, pool *ippoolv1.NodeIPPool, owners poolstatus.Owners, w *holdWork) error {
	if len(pool.Status.Quarantined) == 0 {
		return nil
	}
	views, err := r.holders(ctx, pool, owners)
	if err != nil {
		return err
	}
	now := r.Clock.Now()
	ask := map[string]bool{}
	for _, q := range pool.Status.Quarantined {
		v := judgeQuarantine(q, views[q.IP], now, r.QuarantinePeriod, r.DepartureHold)
		if v.lift.why != "" {
			v.lift.since = q.Since
			w.lift[q.IP] = v.lift
		}
		if v.seen != nil {
			w.seen[q.IP] = *v.seen
		}
		if v.overdue.reason != "" {
			w.overdue[q.IP] = v.overdue
		}
		if v.ask && !ask[q.Node] {
			ask[q.Node] = true
			w.ask = append(w.ask, q.Node)
		}
	}
	slices.Sort(w.ask)
	return nil
}

// existing returns whether a holder of hs exists: an enactment, recording
// or not, or a holder of another kind with a record. A pooled policy's
// node counts as existing whether or not it has a record yet: after the
// grace period its entry is fenced or forgotten (lifecycle.Settler) on the
// policy read from the API server.
func existing(hs holdings) func(string) bool {
	names := make(map[holder.Ref]bool, len(hs.enactments)+len(hs.records))
	for i := range hs.enactments {
		names[holder.ForEnactment(hs.enactments[i].Name)] = true
	}
	for i := range hs.records {
		names[hs.records[i].Holder] = true
	}
	return func(name string) bool {
		h := holder.Parse(name)
		return h.Kind == holder.PolicyNode || names[h]
	}
}

// listNodesFrom is how many quarantined addresses of a pool make a look
// at them list the Nodes once instead of reading each.
func (r maintainer) listNodesFrom() int {
	if r.ListNodesFrom <= 0 {
		return DefaultListNodesFrom
	}
	return r.ListNodesFrom
}

// DefaultListNodesFrom is the default of Reconciler.ListNodesFrom.
const DefaultListNodesFrom = 16

// applyHolds carries w out on a fresh copy of the pool: it removes the
// entries and clears the bits no record claims and no other entry holds,
// keeps the lifted addresses of deleted nodes for their return, and forgets
// kept addresses that expired or that someone holds again. It returns the
// addresses it freed, by cause, and whether it changed anything.
func applyHolds(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, owners poolstatus.Owners, w holdWork,
	holdFor map[netip.Addr][]string, now metav1.Time) (revoked, lifted, held []string, changed bool) {
	a := &holdsApplier{pool: pool, alloc: alloc, owners: owners, holdFor: holdFor, now: now}
	for _, s := range w.prune {
		if e := poolstatus.InFlightOf(pool, s); e != nil && a.recordedBy(s, e.HolderName()) {
			a.removeInFlight(s)
		}
	}
	for s, token := range w.forget {
		if e := poolstatus.InFlightOf(pool, s); e != nil && e.Token == token {
			// Its bit stays, for a quarantine or garbage collection.
			poolstatus.Unrecorded(pool, s)
			a.changed = true
		}
	}
	for s, token := range w.revoke {
		if e := poolstatus.InFlightOf(pool, s); e != nil && e.Token == token {
			a.changed = true
			if poolstatus.Unrecorded(pool, s) && a.free(s, "") {
				revoked = append(revoked, s)
			}
		}
	}
	for s, l := range w.lift {
		if a.lift(s, l) {
			lifted = append(lifted, s)
		}
	}
	for s, seen := range w.seen {
		a.seen(s, seen, now)
	}
	a.forgetKept(w.expire)
	slices.Sort(revoked)
	slices.Sort(lifted)
	slices.Sort(a.held)
	return revoked, lifted, a.held, a.changed
}

// holdsApplier changes one fresh copy of a pool for applyHolds.
type holdsApplier struct {
	pool    *ippoolv1.NodeIPPool
	alloc   *ippool.Allocator
	owners  poolstatus.Owners
	changed bool
	// holdFor, when set, names the nodes that carry an address (see
	// maintenance.holdFor): freed, the address is held for one of them
	// instead, and described in held.
	holdFor map[netip.Addr][]string
	now     metav1.Time
	held    []string
}

func (a *holdsApplier) recordedBy(s, name string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && a.owners.HeldBy(ip, holder.Parse(name))
}

// lift removes the quarantine of s if it is still the one decided on and
// no in-flight entry holds s (then it is lifted once that entry is pruned,
// revoked or forgotten), frees s, and with l.keep keeps it for its holder's
// return. It reports whether it freed s.
func (a *holdsApplier) lift(s string, l lift) bool {
	q := poolstatus.QuarantineOf(a.pool, s)
	if q == nil || !q.Since.Equal(&l.since) || poolstatus.InFlightOf(a.pool, s) != nil {
		return false
	}
	entry := *q
	poolstatus.RemoveQuarantine(a.pool, s)
	a.changed = true
	except := ""
	if l.keep {
		// Kept for its holder's return, not held for the departed node
		// the hold may still count carrying it (it counts from when
		// this process saw the Node go): its return gets it back.
		except = entry.Node
	}
	if !a.free(s, except) {
		return false
	}
	if l.keep {
		since := entry.Since
		if !l.keptSince.IsZero() {
			since = l.keptSince
		}
		poolstatus.AddKept(a.pool, ippoolv1.KeptAddress{IP: s, Node: entry.Node, Holder: entry.HolderName(),
			Capture: entry.Capture, Since: since})
	}
	return true
}

// seen records, on the quarantine of s if it still awaits its first look,
// the time of its holder's state at that look, and restamps its since
// with the controller's clock: from then on the quarantine is timed on
// one clock, whatever the releaser's said.
func (a *holdsApplier) seen(s string, state, now metav1.Time) {
	for i := range a.pool.Status.Quarantined {
		if q := &a.pool.Status.Quarantined[i]; q.IP == s && q.StateSeenAtRelease == nil {
			q.StateSeenAtRelease, q.Since = &state, now
			a.changed = true
		}
	}
}

// forgetKept drops the kept entries that expired (same since), or whose
// address the range no longer hands out or someone holds again.
func (a *holdsApplier) forgetKept(expire map[string]metav1.Time) {
	for _, k := range slices.Clone(a.pool.Status.KeptForReturn) {
		since, expired := expire[k.IP]
		ip, err := netip.ParseAddr(k.IP)
		if err == nil && (!expired || !since.Equal(&k.Since)) {
			if _, err = a.alloc.Range().Assignable(ip); err == nil && !a.alloc.HasIP(ip) {
				continue
			}
		}
		poolstatus.RemoveKept(a.pool, k.IP)
		a.changed = true
		if err == nil && !a.alloc.HasIP(ip) {
			a.holdIfCarried(ip, "") // a kept address is free: nobody else may take it from its carrier
		}
	}
}

func (a *holdsApplier) removeInFlight(s string) {
	poolstatus.RemoveInFlight(a.pool, s)
	a.changed = true
}

// free clears the bit of s unless a record claims it or an entry holds
// it, or holds it for a node other than except that carries it
// (holdIfCarried).
func (a *holdsApplier) free(s, except string) bool {
	ip, err := netip.ParseAddr(s)
	if err != nil || len(a.owners[ip]) > 0 || poolstatus.InFlightOf(a.pool, s) != nil || poolstatus.QuarantineOf(a.pool, s) != nil {
		return false
	}
	if a.holdIfCarried(ip, except) {
		return false
	}
	return a.alloc.ReleaseIP(ip) == nil
}

// holdIfCarried quarantines ip, no holder named, for the first node
// other than except that holdFor says carries it, its bit set, and
// reports whether it did. A deleted Node's hold is lifted after the
// departure hold (judgeQuarantine).
func (a *holdsApplier) holdIfCarried(ip netip.Addr, except string) bool {
	i := slices.IndexFunc(a.holdFor[ip], func(n string) bool { return n != except })
	if i < 0 {
		return false
	}
	node := a.holdFor[ip][i]
	if err := a.alloc.AllocateIP(ip); err != nil && !errors.Is(err, ippool.ErrAllocated) {
		return false
	}
	poolstatus.AddQuarantine(a.pool, ippoolv1.QuarantinedAddress{IP: ip.String(), Node: node, Since: a.now})
	a.held = append(a.held, ip.String()+" on node "+node)
	a.changed = true
	return true
}

// reportHolds logs and tells of freed addresses.
func (r maintainer) reportHolds(ctx context.Context, pool *ippoolv1.NodeIPPool, w holdWork, revoked, lifted []string) {
	log := ctrl.LoggerFrom(ctx)
	if len(revoked) > 0 {
		log.Info("revoked unrecorded addresses", "ips", revoked)
		r.Recorder.Eventf(pool, audit.ListReference(pool.Name, revoked), corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
			"Freed %s: taken by a handler and not recorded within %s; the enactment was fenced so the late record fails",
			listNames(revoked, 10), r.GracePeriod)
	}
	if len(lifted) > 0 {
		whys := make([]string, 0, len(lifted))
		for _, s := range lifted {
			whys = append(whys, s+" ("+w.lift[s].why+")")
		}
		log.Info("lifted quarantine", "ips", lifted)
		r.Recorder.Eventf(pool, audit.ListReference(pool.Name, lifted), corev1.EventTypeNormal, ippoolv1.ReasonQuarantineLifted, "Lift",
			"Freed quarantined %s", listNames(whys, 10))
	}
	r.Metrics.collected(pool.Name, len(revoked)+len(lifted))
}

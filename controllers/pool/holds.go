package pool

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// pruneAfter is how long a recorded address keeps its in-flight entry
// before the controller removes it. Pruning is batched, so that the
// controller's writes do not compete with every allocation of a rollout.
const pruneAfter = 10 * time.Second

// quarantinePoll is how often quarantined addresses are looked at while
// nothing else brings the pool back.
const quarantinePoll = 5 * time.Second

// lift is the decision to free one quarantined address, and with keep, to
// keep it for its holder's return (its Node was deleted).
type lift struct {
	since metav1.Time
	why   string
	keep  bool
}

// holdWork is what one maintenance write does to the entries of a pool,
// decided from a fresh read of the enactments.
type holdWork struct {
	// prune are in-flight entries whose enactment records the address.
	prune []string
	// revoke are in-flight entries left unrecorded past the grace period
	// whose enactment the controller fenced, with the token: never
	// recorded, so never applied, and freed at once.
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
	// expire are kept addresses whose quarantine period has passed, by
	// since: their holder no longer gets them back first.
	expire map[string]metav1.Time
}

// entriesDue returns whether the pool's entries need work now, and how long
// until the next one may. Pruning and quarantine checks are batched: at
// most one every pruneAfter and quarantinePoll, however many enactment
// events bring the pool back.
func (r *Reconciler) entriesDue(pool *ippoolv1.NodeIPPool, claims poolstatus.Claims, exists func(string) bool, m *poolMemory) (bool, time.Duration) {
	lastPrune := m.lastPrune
	now := r.Clock.Now()
	var next time.Duration
	wait := func(d time.Duration) {
		if next == 0 || d < next {
			next = d
		}
	}
	due := false
	for _, e := range pool.Status.InFlight {
		ip, err := netip.ParseAddr(e.IP)
		age := now.Sub(e.Since.Time)
		switch {
		case err == nil && claims.HeldBy(ip, e.Enactment):
			if now.Sub(lastPrune) >= pruneAfter {
				due = true
			} else {
				wait(pruneAfter - now.Sub(lastPrune))
			}
		case age >= r.GracePeriod, !exists(e.Enactment) && age >= pruneAfter:
			// An entry whose enactment is gone is forgotten early; the
			// cache has surely seen a young entry's enactment by then.
			due = true
		case !exists(e.Enactment):
			wait(pruneAfter - age)
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
		if since := now.Sub(m.lastLiftCheck); since >= quarantinePoll {
			due = true
			wait(quarantinePoll)
		} else {
			wait(quarantinePoll - since)
		}
	}
	return due, next
}

// planHolds decides, on the API server's view, which entries to prune,
// revoke and lift. Revoking fences the enactment first.
// An entry whose enactment is gone is forgotten at once: its token can
// never record anything, and its bit stays for a quarantine or garbage
// collection to free.
func (r *Reconciler) planHolds(ctx context.Context, pool *ippoolv1.NodeIPPool, claims poolstatus.Claims,
	exists func(string) bool) (holdWork, error) {
	w := holdWork{revoke: map[string]string{}, forget: map[string]string{}, lift: map[string]lift{}, expire: map[string]metav1.Time{}}
	now := r.Clock.Now()
	for _, e := range pool.Status.InFlight {
		ip, err := netip.ParseAddr(e.IP)
		switch {
		case err == nil && claims.HeldBy(ip, e.Enactment):
			w.prune = append(w.prune, e.IP)
		case !exists(e.Enactment):
			w.forget[e.IP] = e.Token
		case now.Sub(e.Since.Time) >= r.GracePeriod:
			outcome, err := r.fence(ctx, pool, e)
			switch {
			case err != nil:
				return holdWork{}, err
			case outcome == fenced:
				w.revoke[e.IP] = e.Token
			case outcome == movedOn:
				w.forget[e.IP] = e.Token
			}
		}
	}
	nodes := r.nodeUIDs(len(pool.Status.Quarantined))
	for _, q := range pool.Status.Quarantined {
		l, err := r.liftReason(ctx, q, now, nodes)
		if err != nil {
			return holdWork{}, err
		}
		if l.why != "" {
			l.since = q.Since
			w.lift[q.IP] = l
		}
	}
	for _, k := range pool.Status.KeptForReturn {
		if now.Sub(k.Since.Time) >= r.QuarantinePeriod {
			w.expire[k.IP] = k.Since
		}
	}
	return w, nil
}

// fenceOutcome is what fence found.
type fenceOutcome int

const (
	// undecided: the enactment records the address after all, or just
	// changed; the next pass looks again.
	undecided fenceOutcome = iota
	// fenced: the enactment was never written since the address was taken,
	// and now never can be under the token.
	fenced
	// movedOn: the enactment is gone, or was written since without the
	// address.
	movedOn
)

// fence makes sure an address taken for an enactment but not recorded past
// the grace period can never be recorded. The handler records under the
// token resourceVersion, so any write to the enactment makes a late record
// fail. If the enactment is gone or changed since, the token is dead
// already (movedOn); otherwise the controller writes the FenceAnnotation
// under the token (fenced). A conflict means the enactment just changed,
// maybe to record the address (undecided).
func (r *Reconciler) fence(ctx context.Context, pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) (fenceOutcome, error) {
	var enactment nncev1beta1.NodeNetworkConfigurationEnactment
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: e.Enactment}, &enactment)
	switch {
	case apierrors.IsNotFound(err):
		return movedOn, nil
	case err != nil:
		return undecided, fmt.Errorf("get enactment %q: %w", e.Enactment, err)
	case slices.Contains(recordedIPs(&enactment), e.IP):
		return undecided, nil // recorded after all: pruned on the next pass
	case enactment.ResourceVersion != e.Token:
		return movedOn, nil
	}
	patch := client.MergeFromWithOptions(enactment.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if enactment.Annotations == nil {
		enactment.Annotations = map[string]string{}
	}
	enactment.Annotations[ippoolv1.FenceAnnotation] = pool.Name + "/" + e.IP
	if err := r.Client.Patch(ctx, &enactment, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return movedOn, nil
		case apierrors.IsConflict(err):
			return undecided, nil
		}
		return undecided, fmt.Errorf("fence enactment %q: %w", e.Enactment, err)
	}
	r.Recorder.Eventf(&enactment, pool, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
		"NodeIPPool %s revoked %s: taken for this enactment %s ago and never recorded; its handler allocates again",
		pool.Name, e.IP, r.Clock.Since(e.Since.Time).Round(time.Second))
	return fenced, nil
}

// existing returns whether an enactment of enactments has a name.
func existing(enactments []nncev1beta1.NodeNetworkConfigurationEnactment) func(string) bool {
	names := make(map[string]bool, len(enactments))
	for i := range enactments {
		names[enactments[i].Name] = true
	}
	return func(name string) bool { return names[name] }
}

// recordedIPs lists every address an enactment records, in any pool.
func recordedIPs(e *nncev1beta1.NodeNetworkConfigurationEnactment) []string {
	var out []string
	for _, a := range e.Status.IPPool {
		out = append(out, a.Allocated...)
	}
	return out
}

// liftReason tells why a quarantined address may be freed (lift.why), or
// nothing while its former holder may still carry it: the quarantine period
// passed, the Node is gone (its network with it, whatever its last
// published state shows), or its NodeNetworkState, read after the release,
// no longer shows it. An address of a capture (Capture set) whose Node is
// gone is freed and kept for the node's return under its name (lift.keep):
// other nodes get it only when nothing else is free. While a replacement
// under the name is there, it stays quarantined for it.
func (r *Reconciler) liftReason(ctx context.Context, q ippoolv1.QuarantinedAddress, now time.Time, nodes *nodeUIDs) (lift, error) {
	if age := now.Sub(q.Since.Time); age >= r.QuarantinePeriod {
		return lift{why: fmt.Sprintf("the quarantine period of %s passed", r.QuarantinePeriod)}, nil
	}
	if q.Node == "" {
		return lift{}, nil
	}
	uid, gone, err := nodes.get(ctx, q.Node)
	switch {
	case err != nil:
		return lift{}, err
	case gone:
		if q.Capture == "" || q.Enactment == "" {
			return lift{why: fmt.Sprintf("node %s is gone", q.Node)}, nil
		}
		return lift{why: fmt.Sprintf("node %s is gone; kept for its return until %s", q.Node,
			q.Since.Add(r.QuarantinePeriod).UTC().Format(time.RFC3339)), keep: true}, nil
	case q.Capture != "" && q.NodeUID != "" && uid != q.NodeUID:
		return lift{}, nil // its replacement under the name gets it back
	}
	var nns nncev1beta1.NodeNetworkState
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: q.Node}, &nns); err != nil {
		return lift{}, client.IgnoreNotFound(err)
	}
	ip, err := netip.ParseAddr(q.IP)
	if err != nil || !nns.Status.LastSuccessfulUpdateTime.After(q.Since.Time) || poolstatus.StateCarries(nns.Status.CurrentState.Raw, ip) {
		return lift{}, nil
	}
	return lift{why: fmt.Sprintf("node %s no longer carries it", q.Node)}, nil
}

// DefaultListNodesFrom is the default of Reconciler.ListNodesFrom.
const DefaultListNodesFrom = 16

// nodeUIDs tells, for one pass of planHolds, whether a Node exists on the
// API server and under which UID: by one read each, or for many entries
// from one metadata list made on first use.
type nodeUIDs struct {
	reader client.Reader
	list   bool
	uids   map[string]types.UID
}

// nodeUIDs returns the node lookup of a pass over entries quarantined
// addresses.
func (r *Reconciler) nodeUIDs(entries int) *nodeUIDs {
	from := r.ListNodesFrom
	if from <= 0 {
		from = DefaultListNodesFrom
	}
	return &nodeUIDs{reader: r.APIReader, list: entries >= from}
}

// get returns the UID of a Node, or gone.
func (n *nodeUIDs) get(ctx context.Context, name string) (types.UID, bool, error) {
	if n.list {
		if n.uids == nil {
			nodes := &metav1.PartialObjectMetadataList{}
			nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
			if err := n.reader.List(ctx, nodes); err != nil {
				return "", false, fmt.Errorf("list nodes: %w", err)
			}
			n.uids = make(map[string]types.UID, len(nodes.Items))
			for _, node := range nodes.Items {
				n.uids[node.Name] = node.UID
			}
		}
		uid, ok := n.uids[name]
		return uid, !ok, nil
	}
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	switch err := n.reader.Get(ctx, types.NamespacedName{Name: name}, node); {
	case apierrors.IsNotFound(err):
		return "", true, nil
	case err != nil:
		return "", false, fmt.Errorf("get node %q: %w", name, err)
	}
	return node.UID, false, nil
}

// applyHolds carries w out on a fresh copy of the pool: it removes the
// entries and clears the bits no record claims and no other entry holds,
// keeps the lifted addresses of deleted nodes for their return, and forgets
// kept addresses that expired or that someone holds again. It returns the
// addresses it freed, by cause, and whether it changed anything.
func applyHolds(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, claims poolstatus.Claims, w holdWork) (revoked, lifted []string, changed bool) {
	a := &holdsApplier{pool: pool, alloc: alloc, claims: claims}
	for _, s := range w.prune {
		if e := poolstatus.InFlightOf(pool, s); e != nil && a.recordedBy(s, e.Enactment) {
			a.removeInFlight(s)
		}
	}
	for s, token := range w.forget {
		if e := poolstatus.InFlightOf(pool, s); e != nil && e.Token == token {
			a.removeInFlight(s)
		}
	}
	for s, token := range w.revoke {
		if e := poolstatus.InFlightOf(pool, s); e != nil && e.Token == token {
			a.removeInFlight(s)
			if a.free(s) {
				revoked = append(revoked, s)
			}
		}
	}
	for s, l := range w.lift {
		if a.lift(s, l) {
			lifted = append(lifted, s)
		}
	}
	a.forgetKept(w.expire)
	slices.Sort(revoked)
	slices.Sort(lifted)
	return revoked, lifted, a.changed
}

// holdsApplier changes one fresh copy of a pool for applyHolds.
type holdsApplier struct {
	pool    *ippoolv1.NodeIPPool
	alloc   *ippool.Allocator
	claims  poolstatus.Claims
	changed bool
}

func (a *holdsApplier) recordedBy(s, enactment string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && a.claims.HeldBy(ip, enactment)
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
	if !a.free(s) {
		return false
	}
	if l.keep {
		poolstatus.AddKept(a.pool, ippoolv1.KeptAddress{IP: s, Node: entry.Node, Enactment: entry.Enactment,
			Capture: entry.Capture, Since: entry.Since})
	}
	return true
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
	}
}

func (a *holdsApplier) removeInFlight(s string) {
	poolstatus.RemoveInFlight(a.pool, s)
	a.changed = true
}

// free clears the bit of s unless a record claims it or an entry holds it.
func (a *holdsApplier) free(s string) bool {
	ip, err := netip.ParseAddr(s)
	if err != nil || len(a.claims[ip]) > 0 || poolstatus.InFlightOf(a.pool, s) != nil || poolstatus.QuarantineOf(a.pool, s) != nil {
		return false
	}
	return a.alloc.ReleaseIP(ip) == nil
}

// reportHolds logs and tells of freed addresses.
func (r *Reconciler) reportHolds(ctx context.Context, pool *ippoolv1.NodeIPPool, w holdWork, revoked, lifted []string) {
	log := ctrl.LoggerFrom(ctx)
	if len(revoked) > 0 {
		log.Info("revoked unrecorded addresses", "ips", revoked)
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
			"Freed %s: taken by a handler and not recorded within %s; the enactment was fenced so the late record fails",
			listNames(revoked, 10), r.GracePeriod)
	}
	if len(lifted) > 0 {
		whys := make([]string, 0, len(lifted))
		for _, s := range lifted {
			whys = append(whys, s+" ("+w.lift[s].why+")")
		}
		log.Info("lifted quarantine", "ips", lifted)
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, ippoolv1.ReasonQuarantineLifted, "Lift",
			"Freed quarantined %s", listNames(whys, 10))
	}
	r.Metrics.collected(pool.Name, len(revoked)+len(lifted))
}

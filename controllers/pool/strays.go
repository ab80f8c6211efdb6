package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1 "k8s.io/api/core/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// strayHolder holds, each time a node publishes its NodeNetworkState,
// every address of a pool's range that the node carries (static: a lease
// is the DHCP server's) and that the pool has free, held by no entry and
// recorded by no holder: it is quarantined for that node (no holder
// named), as a rebuild does with what it finds (quarantineStrays). Only
// that node adopts it, and no writer hands it to anyone else. Handlers
// run with --self-allocate need it (Reconciler.HoldCarried): they take new
// addresses from the bitmap without reading what other nodes carry, which
// would cost every node a read of every node's state, so an address set
// on a node by hand, or applied after the backup or snapshot its pool
// was restored from, would be handed to a second NIC. The pool
// controller's own serving, the claims and the pooled policies pass such
// an address by without it (assign.Chooser.Avoid).
type strayHolder struct{ r *Reconciler }

// setupStrayHolder registers the strayHolder, keyed by node: a state
// published many times while it waits is looked at once.
func (r *Reconciler) setupStrayHolder(mgr ctrl.Manager, opts SetupOptions) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeippool-strays").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues()}).
		WatchesMetadata(&nncev1beta1.NodeNetworkState{}, &handler.EnqueueRequestForObject{}).
		Complete(strayHolder{r})
}

// Reconcile looks at the state node req.Name published, read from the
// API server: a stale state could show an address its node gave up since.
// Only a state that carries a candidate of some pool (strayCandidates, on
// the cached pools) costs more reads: the Node's, and every holder's
// records. The state of a Node that is gone or being deleted holds what
// it shows for the departure hold only (departed), as the addresses its
// records held are: its machine may run on and carry them until its
// handler takes them off.
func (s strayHolder) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	r := s.r
	var nns nncev1beta1.NodeNetworkState
	if err := r.APIReader.Get(ctx, req.NamespacedName, &nns); err != nil || !lifecycle.Published(&nns) {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	carried := netstate.StaticCarriers(nns.Status.CurrentState.Raw)
	if len(carried) == 0 {
		return ctrl.Result{}, nil
	}
	var list ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("list NodeIPPools: %w", err)
	}
	var pools []string
	for i := range list.Items {
		p := &list.Items[i]
		if len(strayCandidates(p, carried)) > 0 || (poolstatus.Vouched(p) && len(returnConflicts(p, carriedBy(req.Name, carried))) > 0) {
			pools = append(pools, p.Name)
		}
	}
	if len(pools) == 0 {
		return ctrl.Result{}, nil
	}
	n, err := nodemeta.Get(ctx, r.APIReader, req.Name)
	if apierrors.IsNotFound(err) || (err == nil && !n.DeletionTimestamp.IsZero()) {
		if carried, err = r.departed(ctx, req.Name, carried); err != nil || len(carried) == 0 {
			return ctrl.Result{}, err
		}
	} else if err != nil {
		return ctrl.Result{}, err
	}
	hs, err := r.holdingsFromAPI(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for _, pool := range pools {
		errs = append(errs, s.hold(ctx, pool, req.Name, carried, hs))
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// strayCandidates returns the addresses of carried that pool's range
// hands out and that its bitmap, as p shows it, has free and no entry
// holds; nil for a pool that serves nothing (being deleted, refused, not
// yet reconciled) or whose status cannot be read or was not written by
// its writers (a rebuild looks at it).
func strayCandidates(p *ippoolv1.NodeIPPool, carried map[netip.Addr]string) []netip.Addr {
	if poolstatus.Unservable(p) != "" {
		return nil
	}
	rng, err := poolstatus.Range(p)
	if err != nil || !poolstatus.Vouched(p) {
		return nil
	}
	alloc := ippool.NewAllocator(rng)
	if alloc.Restore(p.Status.AllocatedOffsets) != nil {
		return nil
	}
	var out []netip.Addr
	for ip := range carried {
		s := ip.String()
		if _, err := rng.Assignable(ip); err != nil || alloc.HasIP(ip) || poolstatus.InFlightOf(p, s) != nil ||
			poolstatus.QuarantineOf(p, s) != nil || poolstatus.KeptOf(p, s) != nil {
			continue
		}
		out = append(out, ip)
	}
	return out
}

// returnConflicts returns, by address, a node that carriers (an address
// to the nodes whose networks show it) shows carrying an address p keeps
// for the return of a holder of another node: quarantined for its return
// (its record released it) or kept for it (its Node was deleted). A
// self-allocating handler hands such an address back to its holder
// without reading what other nodes carry, which would put it on a second
// NIC: the pool controller takes it from that return (unreturn). An
// address kept for a return whose bit is set, or that an entry holds, is
// someone's again, which is not for this to settle. Call it on the copy a
// pool write changes (its writer vouched for what it read), or check
// poolstatus.Vouched first.
func returnConflicts(p *ippoolv1.NodeIPPool, carriers map[netip.Addr][]string) map[netip.Addr]string {
	if poolstatus.Unservable(p) != "" {
		return nil
	}
	out := map[netip.Addr]string{}
	other := func(ip netip.Addr, owner string) {
		if i := slices.IndexFunc(carriers[ip], func(n string) bool { return n != owner }); i >= 0 {
			out[ip] = carriers[ip][i]
		}
	}
	if len(p.Status.KeptForReturn) > 0 {
		alloc, err := poolstatus.Allocator(p)
		for _, k := range p.Status.KeptForReturn {
			ip, perr := netip.ParseAddr(k.IP)
			if err != nil || perr != nil || alloc.HasIP(ip) || poolstatus.InFlightOf(p, k.IP) != nil || poolstatus.QuarantineOf(p, k.IP) != nil {
				continue
			}
			other(ip, k.Node)
		}
	}
	for _, q := range p.Status.Quarantined {
		if ip, err := netip.ParseAddr(q.IP); err == nil && q.Capture != "" && q.HolderName() != "" {
			other(ip, q.Node)
		}
	}
	return out
}

// unreturn takes the addresses of conflicts (returnConflicts: an address
// to the node that carries it) from the returns they are kept for, in p
// and alloc: neither goes back to its holder any more. A quarantined one
// stays quarantined for its release, its capture cleared; a kept one is
// quarantined again as a release of its holder's, with no capture (its
// bit set): either is lifted once its node shows it gone, or once its Node
// is gone and the departure hold has passed, and is then held for the
// node that carries it if that node still does (holdForCarriers). The
// node that comes back carrying it takes it off. It returns them,
// described, and says why in notes, for the audit trail.
func unreturn(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, conflicts map[netip.Addr]string, now metav1.Time, notes audit.Notes) []string {
	var out []string
	for _, ip := range slices.SortedFunc(maps.Keys(conflicts), netip.Addr.Compare) {
		s, carrier := ip.String(), conflicts[ip]
		if k := poolstatus.KeptOf(p, s); k != nil {
			if poolstatus.InFlightOf(p, s) != nil || poolstatus.QuarantineOf(p, s) != nil || alloc.AllocateIP(ip) != nil {
				continue // someone's again: forgetKept's to settle
			}
			entry := *k
			poolstatus.RemoveKept(p, s)
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: s, Node: entry.Node, Holder: entry.Holder, Since: now})
			out = append(out, fmt.Sprintf("%s on node %s (kept for the return of %s)", s, carrier, entry.HolderName()))
			notes.Set(s, "Unreturned", fmt.Sprintf("node %s carries it, recorded by no holder: no longer kept for the return of %s", carrier, entry.HolderName()))
		} else if q := poolstatus.QuarantineOf(p, s); q != nil && q.Capture != "" && q.HolderName() != "" {
			q.Capture = ""
			out = append(out, fmt.Sprintf("%s on node %s (quarantined for the return of %s)", s, carrier, q.HolderName()))
			notes.Set(s, "Unreturned", fmt.Sprintf("node %s carries it, recorded by no holder: no longer returned to %s", carrier, q.HolderName()))
		}
	}
	return out
}

// returnCarriers returns, when the controller holds carried addresses
// (for self-allocating handlers, which do not look) and pool keeps an
// address for a return, which nodes carry what, for returnConflicts in
// the write: holdFor when the pass read it (the states on the API
// server, as the lifts of the same write see them), else as the watch
// shows them. A node that came to carry an address before its holder
// released it publishes no new state once the release is quarantined,
// so the stray holder never looks at it again. nil otherwise, or when
// that cannot be read (the next pass looks again).
func (r maintainer) returnCarriers(ctx context.Context, pool *ippoolv1.NodeIPPool, holdFor map[netip.Addr][]string) map[netip.Addr][]string {
	if !r.HoldCarried || (len(pool.Status.KeptForReturn) == 0 && !slices.ContainsFunc(pool.Status.Quarantined,
		func(q ippoolv1.QuarantinedAddress) bool { return q.Capture != "" && q.HolderName() != "" })) {
		return nil
	}
	if holdFor != nil {
		return holdFor
	}
	c, err := r.Carried.Complete(ctx, r.APIReader, assign.Carrying{})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "read what nodes carry, for the addresses kept for a return")
		return nil
	}
	return c.Carriers
}

// reportUnreturned raises the Event of the addresses a write took from
// the returns they were kept for.
func (r *Reconciler) reportUnreturned(pool *ippoolv1.NodeIPPool, unreturned []string) {
	if len(unreturned) == 0 {
		return
	}
	r.Recorder.Eventf(pool, audit.ListReference(pool.Name, unreturned), corev1.EventTypeWarning, ippoolv1.ReasonAddressQuarantined, "Hold",
		"Taken from the returns they were kept for: %s. Another node's network carries each, recorded by no holder (set there by hand, "+
			"or by a policy of its own): its holder no longer gets it back, so that it is not on two NICs, and no other holder is given "+
			"it while that node shows it", listNames(unreturned, 10))
}

// hold quarantines for node, in one pool write, what it carries of pool
// that the latest pool has free and that no holder records in hs, read
// from the API server before the write: every writer sets an address's
// bit, with an in-flight entry, before its holder records it, so a record
// written since names an address whose bit is set, which is no
// candidate.
func (s strayHolder) hold(ctx context.Context, pool, node string, carried map[netip.Addr]string, hs holdings) error {
	r := s.r
	var held, unreturned []string
	var uid types.UID
	ctx = audit.WithReason(ctx, "HeldForCarrier", "node "+node+"'s network carries it, and no holder records it")
	notes := audit.Notes{}
	ctx = audit.WithNotes(ctx, notes)
	_, err := r.Pools.Update(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		uid = p.UID
		now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
		free := map[netip.Addr]string{}
		for _, ip := range strayCandidates(p, carried) {
			free[ip] = node
		}
		held = quarantineStrays(p, alloc, poolstatus.Holders(p.Name, alloc.Range(), hs.records), free, now)
		unreturned = unreturn(p, alloc, returnConflicts(p, carriedBy(node, carried)), now, notes)
		return len(held)+len(unreturned) > 0, nil
	})
	switch {
	case apierrors.IsNotFound(err), errors.Is(err, poolwrite.ErrUnvouched), errors.Is(err, poolwrite.ErrUnreadable),
		errors.Is(err, ippool.ErrInvalidRange):
		return nil // gone, or a rebuild's to look at
	case err != nil:
		return fmt.Errorf("hold what node %s carries of NodeIPPool %s: %w", node, pool, err)
	}
	if len(held) > 0 {
		p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool, UID: uid}}
		r.Recorder.Eventf(p, eventnote.Node(node), corev1.EventTypeWarning, ippoolv1.ReasonAddressQuarantined, "Hold",
			"Held %s: free in the pool and recorded by no holder, so only the node that carries it adopts it, and no other holder "+
				"is given it (set on the node by hand, or applied after the backup or snapshot the pool was restored from)",
			listNames(held, 10))
	}
	r.reportUnreturned(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool, UID: uid}}, unreturned)
	return nil
}

// carriedBy returns carried, the addresses node's state shows, as
// carriers: each to node.
func carriedBy(node string, carried map[netip.Addr]string) map[netip.Addr][]string {
	out := make(map[netip.Addr][]string, len(carried))
	for ip := range carried {
		out[ip] = []string{node}
	}
	return out
}

// departed returns what of carried, shown by the state of node just read,
// whose Node is gone or being deleted, still counts as carried by it
// (carriers.Carriers.Within: within the departure hold; while its Node
// is being deleted, all of it).
func (r *Reconciler) departed(ctx context.Context, node string, carried map[netip.Addr]string) (map[netip.Addr]string, error) {
	c, err := r.Carried.Within(ctx, r.APIReader, assign.Carrying{Carriers: carriedBy(node, carried)}, nil)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]string{}
	for ip, iface := range carried {
		if slices.Contains(c.Carriers[ip], node) {
			out[ip] = iface
		}
	}
	return out, nil
}

// holdForCarriers reads, when the controller holds carried addresses and
// w frees some (a revoke, a lift, a kept address expiring), which nodes
// carry each address the nodes' states show, listed from the API server
// (carriers.Carriers.Within: a live Node's, or a deleted Node's within
// the departure hold, whose machine may still run), so that an address
// freed while another node carries it (moved there by hand while its
// holder released it) is held for that node instead of handed out. nil
// otherwise.
func (r maintainer) holdForCarriers(ctx context.Context, w holdWork) (map[netip.Addr][]string, error) {
	if !r.HoldCarried || len(w.revoke)+len(w.lift)+len(w.expire) == 0 {
		return nil, nil
	}
	c, err := r.Carried.Within(ctx, r.APIReader, assign.Carrying{}, nil)
	if err != nil {
		return nil, err
	}
	return c.Carriers, nil
}

// reportHeldForCarriers raises the Event of the addresses a maintenance
// write held for the nodes that carry them instead of freeing them.
func (r maintainer) reportHeldForCarriers(pool *ippoolv1.NodeIPPool, held []string) {
	if len(held) == 0 {
		return
	}
	r.Recorder.Eventf(pool, audit.ListReference(pool.Name, held), corev1.EventTypeWarning, ippoolv1.ReasonAddressQuarantined, "Hold",
		"Held %s instead of freeing it: another node's network carries it and no holder records it, so only that node "+
			"adopts it, and no other holder is given it (moved there by hand, or applied after a restore)", listNames(held, 10))
}

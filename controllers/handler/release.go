package handler

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// Settle brings the node's network in line with what the node holds,
// before its state is published: it rolls back a checkpoint that an apply
// interrupted by a crash left (nmstate would roll it back by itself later,
// putting back what that apply took off), then takes off its interfaces
// every address a pool holds released from one of this node's enactments
// (quarantined, or kept for its return) that no record of the node holds:
// a released address is no longer the node's. An address released by an
// enactment whose policy still captures from that pool an address its
// record lacks, or records one the node does not carry yet (a reset, its
// replacement served and waiting for a slot), stays until that
// enactment's next apply, which takes it off as it puts the replacement
// on: a reset is make before break. An address found on the node that no
// enactment recorded stays: no record released it. It changes nothing
// else. The caller holds NetworkLock, so that the state read after Settle
// is one no apply of this handler can change before it is published.
//
// orphaned says the node's Node is gone. The pools then count every
// address the node held free (kept for its return only for a while), so
// the machine takes off every address of a pool's range it carries that
// no record of the node holds, excluded addresses apart.
//
// The pools are read before the node's records, both from the API server:
// an address handed back to the node meanwhile is recorded by then, and
// stays. A failed take-off is told with a ReleaseFailed Event on the pool
// and returned; a quarantined address stays quarantined, and the pool
// controller's next request for the node's state makes it try again.
func (r *Reconciler) Settle(ctx context.Context, orphaned bool) error {
	log := ctrl.LoggerFrom(ctx).WithValues("node", r.NodeName)
	if err := r.State.Rollback(ctx); err == nil {
		log.Info("rolled back a checkpoint an interrupted apply left")
	}
	var pools ippoolv1.NodeIPPoolList
	if err := r.APIReader.List(ctx, &pools); err != nil {
		return fmt.Errorf("list pools: %w", err)
	}
	released := r.releasedFrom(pools.Items)
	if !orphaned && len(released) == 0 {
		return nil
	}
	current, err := r.State.Show(ctx)
	if err != nil {
		return fmt.Errorf("read the current state: %w", err)
	}
	carried := netstate.Carriers(current)
	if orphaned {
		// The pools free what a deleted Node held, quarantined or not.
		for ip, rel := range released {
			released[ip] = release{pool: rel.pool, free: true}
		}
		maps.Copy(released, inRanges(pools.Items, carried))
	}
	maps.DeleteFunc(released, func(ip netip.Addr, _ release) bool { _, ok := carried[ip]; return !ok })
	if len(released) == 0 {
		return nil
	}
	enactments, err := r.nodeEnactments(ctx)
	if err != nil {
		return err
	}
	held, replacing := heldBy(enactments), r.replacing(ctx, enactments, deleting(pools.Items), carried)
	maps.DeleteFunc(released, func(ip netip.Addr, rel release) bool {
		// Released by an enactment that is being given a replacement:
		// the apply that puts it on takes this one off (make before
		// break; a reset taken off here left the node without an
		// address until the pool served it again, maybe the same one).
		return held[ip] || (!orphaned && !rel.free && replacing[rel.enactment][rel.pool])
	})
	if len(released) == 0 {
		return nil
	}
	return r.takeOff(ctx, current, released)
}

// release is an address a pool holds released from this node.
type release struct {
	pool string
	// enactment is the enactment that released it; "" when kept for the
	// node's return.
	enactment string
	// free says the pool counts the address free already (its Node was
	// deleted): it may be handed to another node at any time.
	free bool
}

// releasedFrom maps the addresses pools hold released from this node
// (quarantined from one of its enactments, or kept for its return) to
// their pool.
func (r *Reconciler) releasedFrom(pools []ippoolv1.NodeIPPool) map[netip.Addr]release {
	out := map[netip.Addr]release{}
	add := func(pool, node, s, enactment string, free bool) {
		if ip, err := netip.ParseAddr(s); err == nil && node == r.NodeName {
			out[ip] = release{pool: pool, enactment: enactment, free: free}
		}
	}
	for _, p := range pools {
		for _, q := range p.Status.Quarantined {
			if q.HolderName() == "" {
				// Found on the node, recorded by no enactment (a per-node
				// policy's static address, say): not released by any
				// record, so not taken off; the pool holds it for the
				// node, whose pooled capture may adopt it.
				continue
			}
			add(p.Name, q.Node, q.IP, q.HolderName(), false)
		}
		for _, k := range p.Status.KeptForReturn {
			add(p.Name, k.Node, k.IP, "", true)
		}
	}
	return out
}

// inRanges maps the addresses of carried that a pool hands out to that
// pool (the first, by name, of overlapping ones), as free.
func inRanges(pools []ippoolv1.NodeIPPool, carried map[netip.Addr]string) map[netip.Addr]release {
	out := map[netip.Addr]release{}
	for _, p := range pools {
		rng, err := poolstatus.Range(&p)
		if err != nil {
			continue
		}
		for ip := range carried {
			if _, taken := out[ip]; taken {
				continue
			}
			if _, err := rng.Assignable(ip); err == nil {
				out[ip] = release{pool: p.Name, free: true}
			}
		}
	}
	return out
}

// nodeEnactments lists this node's enactments from the API server.
func (r *Reconciler) nodeEnactments(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &list, client.MatchingLabels{shared.EnactmentNodeLabel: r.NodeName}); err != nil {
		return nil, fmt.Errorf("list the enactments of node %s: %w", r.NodeName, err)
	}
	return list.Items, nil
}

// heldBy returns the addresses enactments record as allocated.
func heldBy(enactments []nncev1beta1.NodeNetworkConfigurationEnactment) map[netip.Addr]bool {
	held := map[netip.Addr]bool{}
	for _, e := range enactments {
		for _, a := range e.Status.IPPool {
			for _, s := range a.Allocated {
				if ip, err := netip.ParseAddr(s); err == nil {
					held[ip] = true
				}
			}
		}
	}
	return held
}

// deleting returns the names of the pools being deleted.
func deleting(pools []ippoolv1.NodeIPPool) map[string]bool {
	out := map[string]bool{}
	for _, p := range pools {
		if !p.DeletionTimestamp.IsZero() {
			out[p.Name] = true
		}
	}
	return out
}

// replacing returns, by enactment, the pools of which the enactment's
// policy (from the cache) captures an address that its record lacks, or
// that its record holds and the node does not carry yet (carried) unless
// the node gave up applying it: the address it released there (a reset)
// is being replaced, and the apply that puts the replacement on takes it
// off. A rollout the policy controller aborted still replaces: its node
// applies nothing of that generation, so the old address stays on, as
// the rest of the node's configuration does, until a later generation's
// apply puts the replacement on; a node whose own apply failed for good
// has given up, and the old address comes off. An enactment being deleted
// replaces nothing, nor one for which the
// pool has no other address, nor a pool being deleted (it hands out
// nothing, and goes only once the addresses it quarantines are off their
// nodes).
func (r *Reconciler) replacing(ctx context.Context, enactments []nncev1beta1.NodeNetworkConfigurationEnactment,
	deleting map[string]bool, carried map[netip.Addr]string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for i := range enactments {
		e := &enactments[i]
		if !e.DeletionTimestamp.IsZero() {
			continue
		}
		gaveUp := failedFinally(e)
		var policy nmstatev1.NodeNetworkConfigurationPolicy
		if err := r.Client.Get(ctx, types.NamespacedName{Name: e.Labels[shared.EnactmentPolicyLabel]}, &policy); err != nil {
			continue
		}
		captures, err := capture.Parse(policy.Spec.Capture)
		if err != nil {
			continue
		}
		for _, pool := range captures.Pools() {
			if deleting[pool] || exhaustedFor(e, pool) {
				// No other address to put on: the old one comes off, and
				// comes back once its quarantine lifts.
				continue
			}
			if slices.ContainsFunc(captures.RefsOf(pool), func(ref capture.Ref) bool {
				addr, ok := enactmentrecord.Of(e, ref)
				_, on := carried[addr.IP]
				return !ok || (!on && !gaveUp)
			}) {
				if out[e.Name] == nil {
					out[e.Name] = map[string]bool{}
				}
				out[e.Name][pool] = true
			}
		}
	}
	return out
}

// exhaustedFor reports whether e fails because pool has no address left
// for it.
func exhaustedFor(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) bool {
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing)
	return c != nil && c.Status == corev1.ConditionTrue && string(c.Reason) == ippoolv1.ReasonIPPoolExhausted && e.Status.WaitingForIPPool == pool
}

// takeOff applies the state that takes released off the interfaces
// current shows them on, and tells the pools. An address that is only
// quarantined comes off through the apply path (probes, rollback): if
// taking it off breaks the node, it stays on, quarantined, and the pool
// raises a Warning. An address the pool counts free already comes off
// without probes, which could only put it back beside the node it may be
// handed to (and the node-readiness probe cannot pass without a Node).
func (r *Reconciler) takeOff(ctx context.Context, current []byte, released map[netip.Addr]release) error {
	ips := slices.SortedFunc(maps.Keys(released), netip.Addr.Compare)
	desired, from, err := netstate.WithoutAddresses(current, ips)
	if err == nil {
		if slices.ContainsFunc(ips, func(ip netip.Addr) bool { return released[ip].free }) {
			err = r.applyUnprobed(ctx, desired)
		} else {
			err = r.applyProbed(ctx, desired)
		}
		if r.StateChanged != nil {
			r.StateChanged()
		}
	}
	for pool, addrs := range byPool(released, from) {
		p := &ippoolv1.NodeIPPool{}
		p.Name = pool
		if err != nil {
			r.Recorder.Eventf(p, audit.ListReference(pool, addrs), corev1.EventTypeWarning, ippoolv1.ReasonReleaseFailed, "Release",
				"Node %s could not take released %s off: %v; the node tries again",
				r.NodeName, strings.Join(addrs, ", "), err)
			continue
		}
		r.Recorder.Eventf(p, audit.ListReference(pool, addrs), corev1.EventTypeNormal, ippoolv1.ReasonAddressReleased, "Release",
			"Node %s took released %s off", r.NodeName, strings.Join(addrs, ", "))
	}
	if err != nil {
		return fmt.Errorf("take released %v off node %s: %w", ips, r.NodeName, err)
	}
	ctrl.LoggerFrom(ctx).Info("took released addresses off", "node", r.NodeName, "ips", ips)
	return nil
}

// byPool describes released addresses by pool, with the interface each
// was on: "10.0.0.4 (eth1)".
func byPool(released map[netip.Addr]release, from map[netip.Addr]string) map[string][]string {
	out := map[string][]string{}
	for _, ip := range slices.SortedFunc(maps.Keys(released), netip.Addr.Compare) {
		what := ip.String()
		if iface := from[ip]; iface != "" {
			what += " (" + iface + ")"
		}
		pool := released[ip].pool
		out[pool] = append(out[pool], what)
	}
	return out
}

package companion

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// The replacements of a node's recorded addresses: a reset, or an address
// its pool's range no longer hands out. Make before break: the old address
// stays on until the policy with its replacement is applied, unless no
// replacement can come first.

// reset takes, for nobody's return, the addresses the reset annotations
// ask to reset: quarantined, and moved to the node's Released, where they
// stay recorded until the node's policy without them is applied (settle);
// the node gets new ones in the same pass.
func (r *Reconciler) reset(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for _, o := range w.resets.annotated {
		if pool := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]; !slices.Contains(w.captures.Pools(), pool) {
			r.Recorder.Eventf(w.policy, nil, corev1.EventTypeWarning, ippoolv1.ReasonInvalidReset, "Reset",
				"%s=%s on %s %s names no pool this policy draws from (%s): removed without effect", ippoolv1.ResetIPPoolAnnotation,
				pool, kindOf(o), o.GetName(), strings.Join(w.captures.Pools(), ", "))
		}
	}
	for _, node := range slices.Sorted(maps.Keys(w.resets.pools)) {
		rec := next.Status.NodeOf(node)
		if rec == nil || rec.Releasing {
			continue
		}
		drop, _, err := r.replace(ctx, w, rec, func(a ippoolv1.PooledAddress) string {
			if slices.Contains(w.resets.pools[node], a.Pool) {
				return "reset"
			}
			return ""
		})
		switch {
		case err != nil:
			return err
		case len(drop) == 0:
			continue
		}
		r.Recorder.Eventf(w.policy, nil, corev1.EventTypeNormal, ippoolv1.ReasonAddressesDropped, "Reset",
			"Dropped %s of node %s for the %s annotation; the node gets new addresses, and the old ones are free once its policy "+
				"without them is applied and its network shows them gone", ips(drop), node, ippoolv1.ResetIPPoolAnnotation)
	}
	return nil
}

// outside replaces, as a reset does, the recorded addresses that their
// pool's range no longer hands out (the pool re-created over another
// range, or the address excluded): rendered with the new range's prefix
// and gateway they would be wrong, and the pool could never hold them.
// The node gets new ones in the same pass; the old ones stay recorded
// (Released) until its policy without them is applied. A pool that cannot
// serve now (being rebuilt, refused, unusable) replaces nothing yet: the
// node keeps what it has until a new address can be had.
func (r *Reconciler) outside(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for i := range next.Status.Nodes {
		rec := &next.Status.Nodes[i]
		if rec.Releasing || !w.isSelected(rec.Node) {
			continue
		}
		drop, why, err := r.replace(ctx, w, rec, func(a ippoolv1.PooledAddress) string { return outsideOf(w.pools[a.Pool], a) })
		switch {
		case err != nil:
			return err
		case len(drop) == 0:
			continue
		}
		r.Recorder.Eventf(w.policy, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressOutsideRange, "Allocate",
			"Node %s: %s; it gets new addresses, and the old ones are taken off its interfaces", rec.Node, strings.Join(why, "; "))
	}
	return nil
}

// outsideOf says why pool no longer hands out the recorded address a
// (poolstatus.Outside), or "" when it does, or when the pool cannot serve
// a replacement now.
func outsideOf(pool *ippoolv1.NodeIPPool, a ippoolv1.PooledAddress) string {
	if pool == nil || poolstatus.Unservable(pool) != "" {
		return ""
	}
	rng, err := poolstatus.Range(pool)
	ip, perr := netip.ParseAddr(a.IP)
	if err != nil || perr != nil {
		return ""
	}
	return poolstatus.Outside(pool.Name, rng, a.Capture, ip)
}

// replace takes from rec, for nobody's return, the addresses of which why
// says something: quarantined where a pool's range still holds them, and
// moved to the node's Released, where they stay recorded until the node's
// policy without them is applied (settle); allocate gives their captures
// new addresses. It returns them, with what why said of each.
func (r *Reconciler) replace(ctx context.Context, w *world, rec *ippoolv1.PooledPolicyNode,
	why func(ippoolv1.PooledAddress) string) ([]ippoolv1.PooledAddress, []string, error) {
	var drop, keep []ippoolv1.PooledAddress
	var reasons []string
	for _, a := range rec.Addresses {
		if reason := why(a); reason != "" {
			drop, reasons = append(drop, a), append(reasons, reason)
		} else {
			keep = append(keep, a)
		}
	}
	if len(drop) == 0 {
		return nil, nil, nil
	}
	if _, err := lifecycle.Release(ctx, r.Pools, lifecycle.OfPolicyNode(w.policy, rec, drop).WithoutReturn()); err != nil {
		return nil, nil, err
	}
	rec.Addresses, rec.Released = keep, append(rec.Released, drop...)
	return drop, reasons, nil
}

// settle drops from the records the addresses a reset released, once the
// node's policy without them is applied (confirmed on their quarantines),
// or at once when the node has no policy. The policy without them is
// written by plan, as any change of the node's addresses: with their
// replacements, or without them first when none can come (breakFirst).
func (r *Reconciler) settle(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for i := range next.Status.Nodes {
		rec := &next.Status.Nodes[i]
		if len(rec.Released) == 0 || rec.Releasing {
			continue
		}
		out, _, err := r.takenOff(ctx, w, rec, rec.Released)
		if err != nil {
			return err
		}
		if out.confirmed {
			if err := lifecycle.Confirm(ctx, r.Pools, lifecycle.OfPolicyNode(w.policy, rec, rec.Released)); err != nil {
				return err
			}
		}
		if out.confirmed || out.gone {
			rec.Released = nil
		}
	}
	return nil
}

// breakFirst takes a reset's addresses off their node before their
// replacements when none can come first (mustBreak): the node's policy is
// written without them, as a removal (tried again, as a release's, when
// the node fails to apply it). A failure is a problem of the pass.
func (r *Reconciler) breakFirst(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) ([]problem, error) {
	var problems []problem
	for i := range next.Status.Nodes {
		rec := &next.Status.Nodes[i]
		if len(rec.Released) == 0 || rec.Releasing || !mustBreak(w, rec) {
			continue
		}
		out, without, err := r.takenOff(ctx, w, rec, rec.Released)
		switch {
		case err != nil:
			return nil, err
		case without != nil:
			w.removals[rec.Node] = without
			continue
		case out.failed != "":
			problems = append(problems, problem{shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, out.failed})
		}
		if g := w.generated[rec.Node]; !out.failedAt.IsZero() && g != nil && isRemoval(g) && !notReady(w.nodes[rec.Node]) {
			if err := r.retry(ctx, w, rec, g, out.failedAt); err != nil {
				return nil, err
			}
		}
	}
	return problems, nil
}

// mustBreak reports whether a released address of rec has to come off
// before its replacement comes: its capture has none yet, and its pool is
// being deleted or had no address for the node in this pass (full, or
// what is free is reserved for others). Such a pool hands nothing out to
// the node until the address's quarantine lifts, which waits for the
// address to come off; make before break would wait forever.
func mustBreak(w *world, rec *ippoolv1.PooledPolicyNode) bool {
	for _, a := range rec.Released {
		if slices.ContainsFunc(rec.Addresses, func(b ippoolv1.PooledAddress) bool { return b.Capture == a.Capture }) {
			continue
		}
		p := w.pools[a.Pool]
		if p != nil && (!p.DeletionTimestamp.IsZero() || slices.Contains(w.full[rec.Node], a.Pool)) {
			return true
		}
	}
	return false
}

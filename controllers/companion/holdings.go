package companion

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/policystatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

// reset quarantines, for nobody's return, the addresses the reset
// annotations ask to reset and drops them from next's records: the nodes
// get new ones in the same pass.
func (r *Reconciler) reset(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for _, node := range slices.Sorted(maps.Keys(w.resets.pools)) {
		rec := next.Status.NodeOf(node)
		if rec == nil || rec.Releasing {
			continue
		}
		var drop, keep []ippoolv1.PooledAddress
		for _, a := range rec.Addresses {
			if slices.Contains(w.resets.pools[node], a.Pool) {
				drop = append(drop, a)
			} else {
				keep = append(keep, a)
			}
		}
		if len(drop) == 0 {
			continue
		}
		if err := r.quarantine(ctx, w, rec, drop, false); err != nil {
			return err
		}
		rec.Addresses = keep
		r.Recorder.Eventf(w.policy, nil, corev1.EventTypeNormal, ippoolv1.ReasonAddressesDropped, "Reset",
			"Dropped %s of node %s for the %s annotation; the node gets new addresses", ips(drop), node, ippoolv1.ResetIPPoolAnnotation)
	}
	return nil
}

// depart releases the addresses of nodes whose Node is gone: quarantined,
// kept for the node's return (the pool controller frees them once the
// departure hold has passed), and the record dropped; the node's NNCP
// goes in plan.
func (r *Reconciler) depart(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for i := range next.Status.Nodes {
		if n, ok := w.nodes[next.Status.Nodes[i].Node]; ok {
			// A node replaced under its name carries its record's
			// addresses: its quarantines must name the new machine.
			next.Status.Nodes[i].NodeUID = n.UID
		}
	}
	for _, rec := range slices.Clone(next.Status.Nodes) {
		if _, ok := w.nodes[rec.Node]; ok {
			continue
		}
		if err := r.quarantine(ctx, w, &rec, rec.Addresses, !w.deleting); err != nil {
			return err
		}
		dropRecord(next, rec.Node)
		ctrl.LoggerFrom(ctx).Info("released the addresses of a deleted node", "node", rec.Node, "ips", ips(rec.Addresses))
	}
	return nil
}

// release takes the addresses off the nodes the policy no longer selects
// (all of them once it is deleted): quarantined and marked releasing
// first; then, in plan, the node's NNCP is changed to take them off its
// interfaces; once its enactment has applied that, or the node carries
// none of them, the record goes (and its NNCP in plan). Their quarantine
// is lifted by the pool controller on the node's evidence.
func (r *Reconciler) release(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	w.removals = map[string][]byte{}
	for i := range next.Status.Nodes {
		rec := &next.Status.Nodes[i]
		if w.isSelected(rec.Node) && !rec.Releasing {
			continue
		}
		if !rec.Releasing {
			if err := r.quarantine(ctx, w, rec, rec.Addresses, !w.deleting); err != nil {
				return err
			}
			rec.Releasing = true
			r.Recorder.Eventf(w.policy, nil, corev1.EventTypeNormal, ippoolv1.ReasonAddressesReleased, "Release",
				"Releasing %s of node %s (%s): its policy %s takes them off its interfaces", ips(rec.Addresses), rec.Node,
				releaseWhy(w), rec.Policy)
		}
		if g := w.generated[rec.Node]; g != nil && isRemoval(g) {
			continue // done once its enactment is (plan)
		}
		removal, err := r.removal(ctx, rec)
		if err != nil {
			return err
		}
		if removal != nil {
			w.removals[rec.Node] = removal
		}
	}
	// Releases whose removal was applied, or has nothing to remove, are done.
	next.Status.Nodes = slices.DeleteFunc(next.Status.Nodes, func(rec ippoolv1.PooledPolicyNode) bool {
		if !rec.Releasing {
			return false
		}
		if g := w.generated[rec.Node]; g != nil && isRemoval(g) {
			return policystatus.StateOf(w.enactmentOf(rec.Node), g.Generation) != policystatus.Progressing
		}
		return w.removals[rec.Node] == nil
	})
	return nil
}

// releaseWhy says why a pass releases a node's addresses.
func releaseWhy(w *world) string {
	if w.deleting {
		return "the policy is being deleted"
	}
	return "the policy no longer selects it"
}

// removal returns the desired state that takes the node's recorded
// addresses off the interfaces its network state shows them on, or nil
// when it shows none of them. An address on a family DHCP or autoconf
// configures is left for the node's DHCP client.
func (r *Reconciler) removal(ctx context.Context, rec *ippoolv1.PooledPolicyNode) ([]byte, error) {
	var nns nncev1beta1.NodeNetworkState
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: rec.Node}, &nns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil // no state: nothing to take off, the quarantine waits for one
		}
		return nil, fmt.Errorf("get the NodeNetworkState of %s: %w", rec.Node, err)
	}
	var drop []netip.Addr
	for _, a := range rec.Addresses {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			drop = append(drop, ip)
		}
	}
	desired, _, err := nmstatectl.WithoutAddresses(nns.Status.CurrentState.Raw, drop)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("could not take the released addresses off the node's interfaces; they stay quarantined until it shows them gone",
			"node", rec.Node, "error", err.Error())
		return nil, nil
	}
	return desired, nil
}

// quarantine keeps addresses of a node's record from everyone until the
// pool controller has evidence that the node no longer carries them;
// forReturn keeps each for the node's return (the same capture of the
// same holder asking again gets it back first).
func (r *Reconciler) quarantine(ctx context.Context, w *world, rec *ippoolv1.PooledPolicyNode, addrs []ippoolv1.PooledAddress, forReturn bool) error {
	if len(addrs) == 0 {
		return nil
	}
	holder, _ := holderOf(w.policy, rec.Node)
	h := poolwrite.Holder{Node: rec.Node, NodeUID: rec.NodeUID, Enactment: holder, Interfaces: map[string]string{}}
	if forReturn {
		h.Captures = map[string]string{}
	}
	record := ippoolv1.EnactmentIPPools{}
	for _, a := range addrs {
		p := record[a.Pool]
		p.Allocated = append(p.Allocated, a.IP)
		record[a.Pool] = p
		if forReturn {
			h.Captures[a.IP] = a.Capture
		}
		if ifaces := capture.Interfaces(w.policy.Spec.DesiredState.Raw, a.Capture); len(ifaces) > 0 {
			h.Interfaces[a.IP] = ifaces[0]
		}
	}
	if _, err := r.Pools.Quarantine(ctx, h, record); err != nil {
		return fmt.Errorf("quarantine %s of node %s (%s %s): %w", ips(addrs), rec.Node, poolstatus.PooledPolicyKind, w.policy.Name, err)
	}
	return nil
}

// dropRecord removes node's record from p's status.
func dropRecord(p *ippoolv1.PooledNodeNetworkConfigurationPolicy, node string) {
	p.Status.Nodes = slices.DeleteFunc(p.Status.Nodes, func(n ippoolv1.PooledPolicyNode) bool { return n.Node == node })
}

// ips lists the addresses of a record, for messages.
func ips(addrs []ippoolv1.PooledAddress) string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.IP)
	}
	return strings.Join(out, ", ")
}

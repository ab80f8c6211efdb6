package companion

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// A node's addresses are on the interfaces its desired state names, and
// on no other. nmstate leaves an interface a state does not name as it
// is: a pooled policy edited to put its address on eth3 instead of eth2,
// or a node given back an address it still carries where an earlier
// template put it, would have the address on both. The state generated
// for such a node also takes the address off the other interface
// (netstate.OnlyWhereDesired, offOthers), and once
// kubernetes-nmstate's handler has applied it, the node's policy goes
// back to the template's state alone: a snapshot of the old interface's
// addresses kept in the policy would undo later changes to them.

// rendered is a node's last rendered state, and what it was rendered
// from (renderKey). plain is the state rendered from the template alone
// while state also takes the node's addresses off other interfaces; nil
// otherwise.
type rendered struct {
	from  string
	state []byte
	plain []byte
}

// offOthers returns state, rendered for node from the template, with
// rec's addresses taken off every other interface the node carries them
// on, and the template's state as plain when it took any off: the
// interfaces its NodeNetworkState shows them on (read from the API
// server's watch cache, each interface's other addresses kept as the
// state shows them), and those its generated policy puts them on now
// (the template edited while the state has not caught up). final says
// the render stands until what it is rendered from changes: the node
// has applied its policy's generation (or has none yet) and its state
// is known; a render that is not final is made again at the next pass.
func (r *Reconciler) offOthers(ctx context.Context, w *world, node string, state []byte,
	rec *ippoolv1.PooledPolicyNode) (v rendered, final bool, err error) {
	var ips []netip.Addr
	for _, a := range rec.Addresses {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			ips = append(ips, ip)
		}
	}
	var nns nncev1beta1.NodeNetworkState
	err = r.APIReader.Get(ctx, types.NamespacedName{Name: node}, &nns, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	if client.IgnoreNotFound(err) != nil {
		return rendered{}, false, fmt.Errorf("read NodeNetworkState %s: %w", node, err)
	}
	known := err == nil && len(nns.Status.CurrentState.Raw) > 0
	sources := [][]byte{nns.Status.CurrentState.Raw}
	have := w.generated[node]
	if have != nil {
		spec, err := r.specOf(ctx, have)
		if err != nil {
			return rendered{}, false, err
		}
		sources = append(sources, spec.DesiredState.Raw)
	}
	out, moved := state, map[netip.Addr]string{}
	for _, current := range sources {
		if len(current) == 0 {
			continue
		}
		var from map[netip.Addr]string
		if out, from, err = netstate.OnlyWhereDesired(out, current, ips); err != nil {
			return rendered{}, false, fmt.Errorf("node %s: %w", node, err)
		}
		maps.Copy(moved, from)
	}
	final = known && (have == nil || policystatus.StateOf(w.enactmentOf(node), have.Generation) == policystatus.Available)
	if len(moved) == 0 {
		return rendered{state: state}, final, nil
	}
	for _, ip := range slices.SortedFunc(maps.Keys(moved), netip.Addr.Compare) {
		ctrl.LoggerFrom(ctx).Info("the node's policy takes its address off an interface the template no longer puts it on",
			"node", node, "ip", ip.String(), "interface", moved[ip])
	}
	return rendered{state: out, plain: state}, final, nil
}

// settled returns the state node's policy should have now of its last
// render v: the template's state alone once kubernetes-nmstate's handler
// has applied the one that takes its addresses off other interfaces
// (its enactment of that generation Available), v.state until then.
func (r *Reconciler) settled(ctx context.Context, w *world, node, key string, v rendered) []byte {
	have := w.generated[node]
	if v.plain == nil || have == nil || policystatus.StateOf(w.enactmentOf(node), have.Generation) != policystatus.Available ||
		!r.same(ctx, have, r.generate(w, node, v.state, false)) {
		return v.state
	}
	r.renders.Store(key, rendered{from: v.from, state: v.plain})
	return v.plain
}

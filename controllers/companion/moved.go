package companion

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
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
// otherwise. moves says what state takes off, and what stays. final says
// the render stands until what it is rendered from changes; one that is
// not final is made again at the next pass, and only a change of its
// moves or failure is logged again. failed is why it could not be made,
// and unreadable that it stays so until a state changes (errUnreadable).
type rendered struct {
	from       string
	state      []byte
	plain      []byte
	moves      netstate.Moves
	final      bool
	failed     string
	unreadable bool
}

// errUnreadable marks a state offOthers cannot read: it stays so until
// the state changes, and an admin is told.
var errUnreadable = errors.New("cannot be read")

// offOthers returns state, rendered for node from the template, with
// rec's addresses taken off every other interface the node carries them
// on, and the template's state as plain when it took any off: the
// interfaces its NodeNetworkState shows them on (read from the API
// server's watch cache, each interface's other addresses kept as the
// state shows them), and those its generated policy puts them on now
// (the template edited while the state has not caught up). The render is
// final once the node has applied its policy's generation (or has none
// yet) and its state is known.
func (r *Reconciler) offOthers(ctx context.Context, w *world, node string, state []byte,
	rec *ippoolv1.PooledPolicyNode) (rendered, error) {
	var ips []netip.Addr
	for _, a := range rec.Addresses {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			ips = append(ips, ip)
		}
	}
	var nns nncev1beta1.NodeNetworkState
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: node}, &nns, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	if client.IgnoreNotFound(err) != nil {
		return rendered{}, fmt.Errorf("read NodeNetworkState %s: %w", node, err)
	}
	known := err == nil && len(nns.Status.CurrentState.Raw) > 0
	type source struct {
		what  string
		state []byte
	}
	sources := []source{{"NodeNetworkState " + node, nns.Status.CurrentState.Raw}}
	have := w.generated[node]
	if have != nil {
		spec, err := r.specOf(ctx, have)
		if err != nil {
			return rendered{}, err
		}
		sources = append(sources, source{"generated policy " + have.Name, spec.DesiredState.Raw})
	}
	v := rendered{state: state, moves: netstate.Moves{Off: map[netip.Addr]string{}, Stays: map[netip.Addr]string{}}}
	for _, src := range sources {
		if len(src.state) == 0 {
			continue
		}
		out, moves, err := netstate.OnlyWhereDesired(v.state, src.state, ips)
		if err != nil {
			return rendered{}, fmt.Errorf("%s %w: %w", src.what, errUnreadable, err)
		}
		v.state = out
		maps.Copy(v.moves.Off, moves.Off)
		maps.Copy(v.moves.Stays, moves.Stays)
	}
	v.final = known && (have == nil || policystatus.StateOf(w.enactmentOf(node), have.Generation) == policystatus.Available)
	if len(v.moves.Off) > 0 {
		v.plain = state
	}
	return v, nil
}

// reportRender says what a render of node's state does that the last
// one (prev, if there was one) did not: which addresses it takes off
// other interfaces (a log line each), and, with a Warning Event on the
// pooled policy, which stay on one because its family there is
// configured by DHCP or autoconf, or that where the node carries its
// addresses cannot be read. A read the caches have not caught up with
// yet is logged only.
func (r *Reconciler) reportRender(ctx context.Context, w *world, node string, prev *rendered, v rendered) {
	log := ctrl.LoggerFrom(ctx)
	if v.failed != "" {
		if prev != nil && prev.failed == v.failed {
			return
		}
		log.Info("the node's policy is kept as it is until where the node carries its addresses can be read", "node", node, "error", v.failed)
		if v.unreadable {
			r.Recorder.Eventf(w.policy, eventnote.Node(node), corev1.EventTypeWarning, ippoolv1.ReasonAddressNotMoved, "Render",
				"node %s's policy is kept as it is: it takes the node's pool addresses off the interfaces the template no longer puts them on, and where they are is not known: %s",
				node, v.failed)
		}
		return
	}
	var was netstate.Moves
	if prev != nil {
		was = prev.moves
	}
	if !maps.Equal(was.Off, v.moves.Off) {
		for _, ip := range slices.SortedFunc(maps.Keys(v.moves.Off), netip.Addr.Compare) {
			log.Info("the node's policy takes its address off an interface the template no longer puts it on",
				"node", node, "ip", ip.String(), "interface", v.moves.Off[ip])
		}
	}
	if !maps.Equal(was.Stays, v.moves.Stays) {
		for _, ip := range slices.SortedFunc(maps.Keys(v.moves.Stays), netip.Addr.Compare) {
			r.Recorder.Eventf(w.policy, eventnote.Node(node), corev1.EventTypeWarning, ippoolv1.ReasonAddressNotMoved, "Render",
				"%s is on node %s's interface %s too, which the template does not put it on; it cannot be taken off, because that interface's %s is configured by DHCP or autoconf: take it off by hand (one address, one NIC)",
				ip, node, v.moves.Stays[ip], netstate.Family(ip))
		}
	}
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
	r.renders.Store(key, rendered{from: v.from, state: v.plain, moves: v.moves, final: true})
	return v.plain
}

package handler

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

// Settle brings the node's network in line with what the node holds,
// before its state is published: it rolls back a checkpoint that an apply
// interrupted by a crash left (nmstate would roll it back by itself later,
// putting back what that apply took off), then takes off its interfaces
// every address a pool holds released from this node (quarantined, or
// kept for its return) that no record of the node holds: a released
// address is no longer the node's. It changes nothing else. The caller
// holds NetworkLock, so that the state read after Settle is one no apply
// of this handler can change before it is published.
//
// The pools are read before the node's records, both from the API server:
// an address handed back to the node meanwhile is recorded by then, and
// stays. A failed take-off is told with a ReleaseFailed Event on the pool
// and returned; the address stays quarantined, and the pool controller's
// next request for the node's state makes it try again.
func (r *Reconciler) Settle(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("node", r.NodeName)
	if err := r.State.Rollback(ctx); err == nil {
		log.Info("rolled back a checkpoint an interrupted apply left")
	}
	released, err := r.releasedFrom(ctx)
	if err != nil || len(released) == 0 {
		return err
	}
	current, err := r.State.Show(ctx)
	if err != nil {
		return fmt.Errorf("read the current state: %w", err)
	}
	carried := nmstatectl.Carriers(current)
	maps.DeleteFunc(released, func(ip netip.Addr, _ string) bool { _, ok := carried[ip]; return !ok })
	if len(released) == 0 {
		return nil
	}
	held, err := r.heldByNode(ctx)
	if err != nil {
		return err
	}
	maps.DeleteFunc(released, func(ip netip.Addr, _ string) bool { return held[ip] })
	if len(released) == 0 {
		return nil
	}
	return r.takeOff(ctx, current, released)
}

// releasedFrom maps the addresses pools hold released from this node
// (quarantined or kept for its return) to the pool.
func (r *Reconciler) releasedFrom(ctx context.Context) (map[netip.Addr]string, error) {
	var pools ippoolv1.NodeIPPoolList
	if err := r.APIReader.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	out := map[netip.Addr]string{}
	add := func(pool, node, s string) {
		if ip, err := netip.ParseAddr(s); err == nil && node == r.NodeName {
			out[ip] = pool
		}
	}
	for _, p := range pools.Items {
		for _, q := range p.Status.Quarantined {
			add(p.Name, q.Node, q.IP)
		}
		for _, k := range p.Status.KeptForReturn {
			add(p.Name, k.Node, k.IP)
		}
	}
	return out, nil
}

// heldByNode returns the addresses this node's enactments record, read
// from the API server.
func (r *Reconciler) heldByNode(ctx context.Context) (map[netip.Addr]bool, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &list, client.MatchingLabels{shared.EnactmentNodeLabel: r.NodeName}); err != nil {
		return nil, fmt.Errorf("list the enactments of node %s: %w", r.NodeName, err)
	}
	held := map[netip.Addr]bool{}
	for _, e := range list.Items {
		for _, a := range e.Status.IPPool {
			for _, s := range a.Allocated {
				if ip, err := netip.ParseAddr(s); err == nil {
					held[ip] = true
				}
			}
		}
	}
	return held, nil
}

// takeOff applies the state that takes released (by pool) off the
// interfaces current shows them on, through the apply path (probes,
// rollback), and tells the pools.
func (r *Reconciler) takeOff(ctx context.Context, current []byte, released map[netip.Addr]string) error {
	ips := slices.SortedFunc(maps.Keys(released), netip.Addr.Compare)
	desired, from, err := nmstatectl.WithoutAddresses(current, ips)
	if err == nil {
		err = r.applyProbed(ctx, desired)
		if r.StateChanged != nil {
			r.StateChanged()
		}
	}
	for pool, addrs := range byPool(released, from) {
		p := &ippoolv1.NodeIPPool{}
		p.Name = pool
		if err != nil {
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ippoolv1.ReasonReleaseFailed, "Release",
				"Node %s could not take released %s off: %v; they stay quarantined, and the node tries again",
				r.NodeName, strings.Join(addrs, ", "), err)
			continue
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ippoolv1.ReasonAddressReleased, "Release",
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
func byPool(released map[netip.Addr]string, from map[netip.Addr]string) map[string][]string {
	out := map[string][]string{}
	for _, ip := range slices.SortedFunc(maps.Keys(released), netip.Addr.Compare) {
		what := ip.String()
		if iface := from[ip]; iface != "" {
			what += " (" + iface + ")"
		}
		out[released[ip]] = append(out[released[ip]], what)
	}
	return out
}

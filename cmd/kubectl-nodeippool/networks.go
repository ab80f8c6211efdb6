package main

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// networks maps each Node to the addresses its NodeNetworkState shows,
// each true when static, false when learned (DHCP, autoconfiguration):
// what check compares the records with.
type networks map[string]map[netip.Addr]bool

// liveStates lists the Nodes and the NodeNetworkStates of those that
// exist. The state of a Node that is gone is left out: its machine is
// gone with it, and the state stays only until it is collected.
func liveStates(ctx context.Context, k client.Client) ([]corev1.Node, []nncev1beta1.NodeNetworkState, error) {
	var nodes corev1.NodeList
	if err := k.List(ctx, &nodes); err != nil {
		return nil, nil, fmt.Errorf("list Nodes: %w", err)
	}
	var states nncev1beta1.NodeNetworkStateList
	if err := k.List(ctx, &states); err != nil {
		return nil, nil, fmt.Errorf("list NodeNetworkStates: %w", err)
	}
	live := make(map[string]bool, len(nodes.Items))
	for _, n := range nodes.Items {
		live[n.Name] = true
	}
	return nodes.Items, slices.DeleteFunc(states.Items, func(nns nncev1beta1.NodeNetworkState) bool { return !live[nns.Name] }), nil
}

// readNetworks reads what the NodeNetworkState of every existing Node
// shows (liveStates).
func readNetworks(ctx context.Context, k client.Client) (networks, error) {
	_, states, err := liveStates(ctx, k)
	if err != nil {
		return nil, err
	}
	out := networks{}
	for _, nns := range states {
		out[nns.Name] = map[netip.Addr]bool{}
		static := netstate.StaticCarriers(nns.Status.CurrentState.Raw)
		for ip := range netstate.Carriers(nns.Status.CurrentState.Raw) {
			_, out[nns.Name][ip] = static[ip]
		}
	}
	return out, nil
}

// carriersIn maps each address of rng that a node carries to the nodes
// that carry it, sorted.
func (n networks) carriersIn(rng *ippool.Range) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, node := range slices.Sorted(maps.Keys(n)) {
		for ip := range n[node] {
			if _, err := rng.Assignable(ip); err == nil {
				out[ip] = append(out[ip], node)
			}
		}
	}
	return out
}

// onNetworks compares what the nodes carry of p's range (alloc) with the
// holders' records. Its problems break the rule of one address on one
// NIC: an address on two nodes' networks, or on one node's while a record
// holds it for another node. Its notes are addresses a node carries that
// no record holds, and what becomes of each; they are not problems.
func onNetworks(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, records []holder.Record, n networks) (problems, notes []string) {
	carriers := n.carriersIn(alloc.Range())
	for _, ip := range slices.SortedFunc(maps.Keys(carriers), netip.Addr.Compare) {
		nodes := carriers[ip]
		if len(nodes) > 1 {
			fix := fmt.Sprintf("reset the records of all but the node that keeps it (annotation %s=%s)", ippoolv1.ResetIPPoolAnnotation, p.Name)
			if !recordedAnywhere(ip, records) {
				fix = "no record holds it: take it off all but one node, or exclude it from the range (spec.range.exclude)"
			}
			problems = append(problems, fmt.Sprintf("%s is on the networks of nodes %s: one address on two NICs; %s",
				ip, strings.Join(nodes, ", "), fix))
			continue
		}
		node := nodes[0]
		recorders, others := recordersOf(ip, records, node)
		switch {
		case len(others) > 0 && !recorders:
			problems = append(problems, fmt.Sprintf("%s is on node %s's network, but %s records it for another node: "+
				"reset the record of the node that does not carry it (annotation %s=%s), or take it off node %s",
				ip, node, strings.Join(others, " and "), ippoolv1.ResetIPPoolAnnotation, p.Name, node))
		case !recorders && len(others) == 0:
			if fate := unrecordedFate(p, alloc, ip, node, n[node][ip]); fate != "" {
				notes = append(notes, fmt.Sprintf("%s is on node %s's network and recorded by no holder: %s", ip, node, fate))
			}
		}
	}
	return problems, notes
}

// recordedAnywhere reports whether a record of any holder holds ip, an
// address of pool's range, under pool or an overlapping pool (which
// claims it on pool too, poolstatus.OwnersOf).
func recordedAnywhere(ip netip.Addr, records []holder.Record) bool {
	return slices.ContainsFunc(records, func(rec holder.Record) bool { return holds(rec, ip) })
}

// holds reports whether rec holds ip (held or being released) under any
// pool. An IPAddress this provider did not make (holder.IPAddress) holds
// nothing.
func holds(rec holder.Record, ip netip.Addr) bool {
	if rec.Holder.Kind == holder.IPAddress {
		return false
	}
	for _, held := range rec.Pools {
		if slices.Contains(held.Held(), ip.String()) {
			return true
		}
	}
	return false
}

// recordersOf tells whether a record of node, or of no node (a claim's,
// whose machine no Node names), holds ip, an address of a pool's range,
// under that pool or an overlapping one (held or being released), and
// names the holders that hold it for other nodes.
func recordersOf(ip netip.Addr, records []holder.Record, node string) (byNode bool, others []string) {
	for _, rec := range records {
		if !holds(rec, ip) {
			continue
		}
		switch rec.Node {
		case node, "":
			byNode = true
		default:
			others = append(others, fmt.Sprintf("%s (node %s)", rec.Holder.Title(), rec.Node))
		}
	}
	return byNode, others
}

// unrecordedFate says what becomes of ip, which node carries (static or
// learned) and no record holds; "" when an entry holds it for that node
// (found there, or released by it) or hands it to a holder already.
func unrecordedFate(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, ip netip.Addr, node string, static bool) string {
	s := ip.String()
	if !static {
		return "learned (DHCP or autoconfiguration), so no node adopts it, and the pool controller passes it by; " +
			"exclude it from the range (spec.range.exclude) if the DHCP server hands it out"
	}
	if q := poolstatus.QuarantineOf(p, s); q != nil {
		if q.Node == node {
			return ""
		}
		return fmt.Sprintf("quarantined for node %s, which it is not on", q.Node)
	}
	if poolstatus.InFlightOf(p, s) != nil {
		return ""
	}
	if k := poolstatus.KeptOf(p, s); k != nil {
		if k.Node == node {
			return fmt.Sprintf("kept for the return of %s, to which it goes back", k.HolderName())
		}
		return fmt.Sprintf("kept for the return of %s (node %s), which does not get it back, nor does any other holder, "+
			"while node %s carries it; take it off node %s if it is not that holder's", k.HolderName(), k.Node, node, node)
	}
	if alloc.HasIP(ip) {
		return fmt.Sprintf("set in the pool; the pool controller holds it for node %s when it serves the node, "+
			"or when its garbage collection finds it", node)
	}
	return fmt.Sprintf("free in the pool; node %s adopts it when a policy asks the pool for an address on that interface, "+
		"and the pool controller gives it to no other node while node %s's network shows it", node, node)
}

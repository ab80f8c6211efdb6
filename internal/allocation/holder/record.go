package holder

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/nmstate/kubernetes-nmstate/api/shared"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// Record is a holder's durable record of the addresses it holds: what
// every reader of a pool's holders counts (rebuilds, garbage collection,
// collisions, overlaps, quarantines, reservations, the range webhook and
// the plugin), whatever the kind of the holder. Where it lives differs by
// kind: an enactment's status.ippool, a pooled policy's status.nodes, a
// claim's IPAddress.
type Record struct {
	Holder Ref
	// Node is the node that carries the addresses; empty for a claim,
	// whose machine no Node names here.
	Node string
	// Policy is the policy the addresses are applied for: the enactment's
	// or the pooled policy's; empty for a claim.
	Policy string
	// Pools holds the addresses by the name of the pool they are recorded
	// under.
	Pools ippoolv1.EnactmentIPPools
	// Captures names the capture of each address, where the record says
	// without parsing a state (a pooled policy's node).
	Captures map[netip.Addr]string
	// Enactment is the enactment whose record this is, for the details
	// (captures, interfaces) a message may ask of it; nil for the other
	// kinds. Never change it: it may be a cache's own.
	Enactment *nncev1beta1.NodeNetworkConfigurationEnactment
}

// OfEnactment returns the record of an enactment: its status.ippool, its
// node and its policy from kubernetes-nmstate's labels.
func OfEnactment(e *nncev1beta1.NodeNetworkConfigurationEnactment) Record {
	return Record{Holder: ForEnactment(e.Name), Node: e.Labels[shared.EnactmentNodeLabel],
		Policy: e.Labels[shared.EnactmentPolicyLabel], Pools: e.Status.IPPool, Enactment: e}
}

// OfEnactments returns the record of each enactment that records an
// address; the records point into enactments.
func OfEnactments(enactments []nncev1beta1.NodeNetworkConfigurationEnactment) []Record {
	out := make([]Record, 0, len(enactments))
	for i := range enactments {
		if len(enactments[i].Status.IPPool) > 0 {
			out = append(out, OfEnactment(&enactments[i]))
		}
	}
	return out
}

// OfPolicyNode returns the record a pooled policy keeps of one node: the
// addresses it applies there and those it is taking off (a node whose
// addresses are being released still holds them).
func OfPolicyNode(policy string, n ippoolv1.PooledPolicyNode) Record {
	r := Record{Holder: ForPolicyNode(policy, n.Node), Node: n.Node, Policy: policy, Pools: n.Record(),
		Captures: map[netip.Addr]string{}}
	for _, a := range n.Addresses {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			r.Captures[ip] = a.Capture
		}
	}
	return r
}

// OfPooledPolicies returns the record of every node of policies that
// holds an address.
func OfPooledPolicies(policies []ippoolv1.PooledNodeNetworkConfigurationPolicy) []Record {
	var out []Record
	for i := range policies {
		for _, n := range policies[i].Status.Nodes {
			if len(n.Held()) > 0 {
				out = append(out, OfPolicyNode(policies[i].Name, n))
			}
		}
	}
	return out
}

// For returns the address the record holds for a capture of a pool: the
// capture's state (an enactment's) or entry (a pooled policy node's) names
// it, and the pool's record lists it as allocated.
func (r *Record) For(ref capture.Ref) (netip.Addr, bool) {
	if r.Enactment != nil {
		addr, ok := enactmentrecord.Of(r.Enactment, ref)
		return addr.IP, ok
	}
	for _, ip := range slices.SortedFunc(maps.Keys(r.Captures), netip.Addr.Compare) {
		if r.Captures[ip] == ref.Capture && slices.Contains(r.Pools[ref.Pool].Allocated, ip.String()) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

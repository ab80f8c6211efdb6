// Package lifecycle is an address's life with its holder, the same for
// every kind of holder: an enactment (handler mode), a node of a pooled
// policy (companion mode), a Cluster API claim.
//
// A holder takes an address under a token (assign.Chooser.Serve) and
// records it later; the pool controller settles each in-flight entry by
// one rule (Settler.Settle): pruned once recorded, forgotten once the
// holder is gone, and otherwise, past the grace period, revoked after a
// fence that no stalled writer of the record can outlive. Each kind
// brings its part (what keeps its entries, how its record is fenced).
//
// A holder that gives addresses up is a Former: who it is, the node that
// carries the addresses and the interface of each (what the pool
// controller lifts their quarantine on), and the capture of each (what
// keeps them for the holder's return). Each kind builds its Former from
// the record it keeps (OfEnactment, OfPolicyNode, OfClaim); what happens
// next is written once:
//
//  1. Release quarantines the addresses in every pool whose range hands
//     them out: they stay allocated, handed to nobody, until the pool
//     controller has evidence that the node no longer carries them;
//  2. only then may the kind remove its record (an enactment's
//     status.ippool, a pooled policy's status.nodes entry, a claim's
//     IPAddress): before step 1 the record protects the addresses, after it
//     the quarantine does;
//  3. a kind whose handler reports that the addresses are off without
//     publishing a state (kubernetes-nmstate's, under companion mode)
//     confirms it (Confirm) before its record goes.
package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// Former is a holder giving addresses up, and the addresses.
type Former struct {
	holder poolwrite.Holder
	record ippoolv1.EnactmentIPPools
}

// OfEnactment is an enactment giving up the addresses its record holds
// (status.ippool, allocated and releasing): its node, from
// kubernetes-nmstate's label, and that Node's UID, from the owner
// reference; the capture of each address its captured states still hold,
// which keeps it for the enactment's return; the interface its desired
// state puts it on.
func OfEnactment(e *nncev1beta1.NodeNetworkConfigurationEnactment) Former {
	h := poolwrite.Holder{Node: e.Labels[shared.EnactmentNodeLabel], Ref: holder.ForEnactment(e.Name)}
	for _, ref := range e.OwnerReferences {
		if ref.Kind == "Node" && ref.APIVersion == "v1" && ref.Name == h.Node {
			h.NodeUID = ref.UID
		}
	}
	for name, state := range e.Status.CapturedStates {
		if addr, ok := capture.ParseState(state.State.Raw); ok {
			if h.Captures == nil {
				h.Captures = map[string]string{}
			}
			h.Captures[addr.IP.String()] = name
		}
	}
	for ip, iface := range netstate.Carriers(e.Status.DesiredState.Raw) {
		if h.Interfaces == nil {
			h.Interfaces = map[string]string{}
		}
		h.Interfaces[ip.String()] = iface
	}
	return Former{holder: h, record: e.Status.IPPool}
}

// OfPolicyNode is a node of a pooled policy giving up addrs, which its
// record (rec) holds: the node and its UID as the record names them; the
// capture of each address, which keeps it for the node's return; the
// interface the policy's desired state puts the capture on.
func OfPolicyNode(p *ippoolv1.PooledNodeNetworkConfigurationPolicy, rec *ippoolv1.PooledPolicyNode, addrs []ippoolv1.PooledAddress) Former {
	h := poolwrite.Holder{Node: rec.Node, NodeUID: rec.NodeUID, Ref: holder.ForPolicyNode(p.Name, rec.Node)}
	record := ippoolv1.EnactmentIPPools{}
	for _, a := range addrs {
		pa := record[a.Pool]
		pa.Allocated = append(pa.Allocated, a.IP)
		record[a.Pool] = pa
		if h.Captures == nil {
			h.Captures, h.Interfaces = map[string]string{}, map[string]string{}
		}
		h.Captures[a.IP] = a.Capture
		if ifaces := capture.Interfaces(p.Spec.DesiredState.Raw, a.Capture); len(ifaces) > 0 {
			h.Interfaces[a.IP] = ifaces[0]
		}
	}
	return Former{holder: h, record: record}
}

// OfClaim is a Cluster API claim giving up its address ip of pool.
// carrier is the node whose network state shows the address (the
// claim's machine, when it joined the cluster), or "" when none does;
// a claim has no capture, so nothing is kept for its return.
func OfClaim(claim holder.Ref, carrier, pool string, ip netip.Addr) Former {
	return Former{holder: poolwrite.Holder{Node: carrier, Ref: claim},
		record: ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip.String()}}}}
}

// WithoutReturn is f with nothing kept for the holder's return: what a
// reset takes, or a policy no longer applies, goes back to nobody.
func (f Former) WithoutReturn() Former {
	f.holder = f.holder.WithoutReturn()
	return f
}

// Only is f giving up record (a part of what it holds) instead.
func (f Former) Only(record ippoolv1.EnactmentIPPools) Former {
	f.record = record
	return f
}

// Holder is the holder giving the addresses up.
func (f Former) Holder() holder.Ref { return f.holder.Ref }

// Node is the node whose evidence lifts the quarantines: the one that
// carries the addresses; "" when none is known to.
func (f Former) Node() string { return f.holder.Node }

// Record is the addresses given up, by pool.
func (f Former) Record() ippoolv1.EnactmentIPPools { return f.record }

// Entries are the quarantines Release writes for f's addresses at since,
// in the order of f.Record().Held() by pool name: what the pool
// controller judges its evidence on.
func (f Former) Entries(since metav1.Time) []ippoolv1.QuarantinedAddress {
	var out []ippoolv1.QuarantinedAddress
	for _, pool := range slices.Sorted(maps.Keys(f.record)) {
		for _, ip := range f.record[pool].Held() {
			out = append(out, f.holder.Entry(ip, since))
		}
	}
	return out
}

// Release quarantines the addresses f gives up (step 1), in every pool
// whose range hands them out, and returns those it newly quarantined, by
// pool. Call it before the record goes, and again after an error: the
// record must stay until it succeeds. It is idempotent.
func Release(ctx context.Context, w *poolwrite.Writer, f Former) (ippoolv1.EnactmentIPPools, error) {
	q, err := w.Quarantine(ctx, f.holder, f.record)
	if err != nil {
		return nil, fmt.Errorf("quarantine %s of %s before its record goes: %w", addresses(f.record), f.holder.Ref.Title(), err)
	}
	return q, nil
}

// Confirm records on the quarantines of f's addresses that a handler
// applied and verified their removal from the node (step 3): the node's
// network state, whenever published, is evidence then. Call it after
// Release, before the record goes, and only on a confirmed apply.
func Confirm(ctx context.Context, w *poolwrite.Writer, f Former) error {
	return w.ConfirmRelease(ctx, f.holder, f.record)
}

// addresses lists the addresses of a record, sorted, for messages.
func addresses(record ippoolv1.EnactmentIPPools) string {
	out := record.Held()
	slices.Sort(out)
	return strings.Join(out, ", ")
}

package pool

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// honored is the ReservationsHonored condition of a pool whose reservations
// are all held by their nodes or free for them.
var honored = availability{metav1.ConditionTrue, ippoolv1.ReasonReservationsHonored,
	"Every reserved address is held by its node or free for it"}

// reservationsOf decides the ReservationsHonored condition: invalid
// reservations first, then reserved addresses held by a node they are not
// for, or free and carried by the network of a node they are not for
// (carriers: by address, the nodes whose networks carry it), which keeps
// them from everyone (assign.Chooser.Avoid). nodeLabels returns a node's
// labels (nil if unknown); it is called only for reservations by label
// selector. Nothing is taken from anyone: the message says how to move an
// address.
func reservationsOf(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, owners poolstatus.Owners,
	nodeLabels func(string) map[string]string, carriers map[netip.Addr][]string) availability {
	valid, invalid := assign.Reservations(pool, alloc.Range())
	if len(invalid) > 0 {
		msgs := make([]string, 0, len(invalid))
		for _, in := range invalid {
			msgs = append(msgs, fmt.Sprintf("%s (%s)", in.IP, in.Why))
		}
		return refused(ippoolv1.ReasonReservationInvalid, fmt.Sprintf(
			"These reservations can never be handed out and are ignored: %s; fix or remove them in spec.reservations", listNames(msgs, 5)))
	}
	var conflicts []string
	for _, res := range valid {
		for _, o := range owners.Recognized(res.IP) {
			if res.Matches(o.Node, o.Policy, func() map[string]string { return nodeLabels(o.Node) }) {
				continue
			}
			who := fmt.Sprintf("node %s (enactment %s)", o.Node, o.Holder.Name)
			if o.Holder.Foreign() {
				who = o.Describe(pool.Name)
			}
			conflicts = append(conflicts, fmt.Sprintf("%s is reserved for %s but held by %s; to move it, run: %s",
				res.IP, res.Describe(), who, o.Remedy(pool.Name)))
		}
		carrying := carriers[res.IP]
		if alloc.Has(res.Offset) {
			// Held for the node found carrying it, if no holder's.
			carrying = nil
			if q := poolstatus.QuarantineOf(pool, res.IP.String()); q != nil && q.HolderName() == "" && q.Node != "" {
				carrying = []string{q.Node}
			}
		}
		for _, node := range notFor(res, carrying, nodeLabels) {
			conflicts = append(conflicts, fmt.Sprintf("%s is reserved for %s but node %s's network carries it and no holder records it, "+
				"so no one is given it; take it off node %s (set by hand, or by a policy of its own)", res.IP, res.Describe(), node, node))
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return refused(ippoolv1.ReasonReservationConflict, strings.Join(conflicts, "; ")+
			". The holder keeps the address until then")
	}
	if moves := unheld(pool, alloc, valid, owners); len(moves) > 0 {
		return refused(ippoolv1.ReasonReservationNotHeld, strings.Join(moves, "; ")+
			". A node keeps the address it holds until it is reset as the command says")
	}
	return honored
}

// notFor returns the nodes of carriers (those whose networks carry the
// reserved address) that res is not for; its own node adopts it.
func notFor(res assign.Reservation, carriers []string, nodeLabels func(string) map[string]string) []string {
	var out []string
	for _, node := range carriers {
		if res.Node != node && (res.Node != "" || !res.Matches(node, res.Policy, func() map[string]string { return nodeLabels(node) })) {
			out = append(out, node)
		}
	}
	return out
}

// unheld describes the free addresses reserved by name for a node that
// holds another address of the pool for the same policy, with the command
// that moves it.
func unheld(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, valid []assign.Reservation, owners poolstatus.Owners) []string {
	type held struct {
		poolstatus.Owner
		ip netip.Addr
	}
	byNode := map[string][]held{}
	for ip, holders := range owners {
		for _, o := range holders {
			if o.Pool == pool.Name && o.Node != "" {
				byNode[o.Node] = append(byNode[o.Node], held{o, ip})
			}
		}
	}
	for _, hs := range byNode {
		slices.SortFunc(hs, func(a, b held) int { return a.ip.Compare(b.ip) })
	}
	var out []string
	for _, res := range valid {
		if res.Node == "" || alloc.Has(res.Offset) {
			continue
		}
		for _, o := range byNode[res.Node] {
			if res.Policy == "" || res.Policy == o.Policy {
				out = append(out, fmt.Sprintf("node %s holds %s, not its reserved %s, which is free; to move it, run: %s",
					res.Node, o.ip, res.IP, o.Remedy(pool.Name)))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// setCondition sets the condition of type t on pool. It reports whether
// anything changed and whether the condition transitioned (a new status or
// reason). The transition time moves only when the status flips.
func setCondition(pool *ippoolv1.NodeIPPool, t string, a availability, now time.Time) (changed, transitioned bool) {
	old := meta.FindStatusCondition(pool.Status.Conditions, t)
	if old != nil && old.Status == a.status && old.Reason == a.reason && old.Message == a.message && old.ObservedGeneration == pool.Generation {
		return false, false
	}
	transitioned = old == nil || old.Status != a.status || old.Reason != a.reason
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: t, Status: a.status,
		Reason: a.reason, Message: a.message, ObservedGeneration: pool.Generation, LastTransitionTime: metav1.NewTime(now)})
	return true, transitioned
}

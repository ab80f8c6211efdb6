package main

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
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// Verdicts of a node under a proposed pooled policy.
const (
	// verdictKeeps: the node keeps the address it carries (adopted).
	verdictKeeps = "keeps"
	// verdictHolds: the node's record (its enactment, or the pooled
	// policy's status) already holds an address, or one is kept for its
	// return.
	verdictHolds = "holds"
	// verdictRenumbered: the node gets a new address; what it carries on
	// the interface (if anything) is replaced.
	verdictRenumbered = "renumbered"
	// verdictNew: the node carries nothing there and gets a new address.
	verdictNew = "new"
	// verdictWaits: the pool has no address left for the node, or the
	// node has published no state yet.
	verdictWaits = "waits"
)

// nodePlan is what a proposed pooled policy would give one node for one
// capture.
type nodePlan struct {
	Policy  string `json:"policy"`
	Capture string `json:"capture"`
	Pool    string `json:"pool"`
	Node    string `json:"node"`
	// Interfaces are where the template puts the capture's address.
	Interfaces []string `json:"interfaces,omitempty"`
	// Carries are the addresses the node carries there.
	Carries []string `json:"carries,omitempty"`
	Verdict string   `json:"verdict"`
	// IP is the address the node would have.
	IP  string `json:"ip,omitempty"`
	Why string `json:"why,omitempty"`
}

// policyPlan is the plan of one proposed policy.
type policyPlan struct {
	Policy string     `json:"policy"`
	Nodes  []nodePlan `json:"nodes"`
	// Problems are why the policy would not render or not be served.
	Problems []string `json:"problems,omitempty"`
}

// nodes is what an adoption plan reads besides the snapshot: the nodes and
// what their NodeNetworkStates show.
type nodes struct {
	items []corev1.Node
	// carried maps a node to its addresses and their interfaces; static
	// to the static ones only (the candidates for adoption).
	carried, static map[string]map[netip.Addr]string
	// carriers maps an address to the nodes that carry it.
	carriers map[netip.Addr][]string
}

func readNodes(ctx context.Context, k client.Client) (*nodes, error) {
	items, states, err := liveStates(ctx, k)
	if err != nil {
		return nil, err
	}
	// As for the controllers: every address the state of an existing Node
	// shows is carried (no other node gets it), but only a node whose
	// state is published (lifecycle.Published) can adopt; another waits.
	n := &nodes{items: items, carried: map[string]map[netip.Addr]string{}, static: map[string]map[netip.Addr]string{},
		carriers: assign.CarriersOf(states)}
	for _, nns := range states {
		n.carried[nns.Name] = netstate.Carriers(nns.Status.CurrentState.Raw)
		if lifecycle.Published(&nns) {
			n.static[nns.Name] = netstate.StaticCarriers(nns.Status.CurrentState.Raw)
		}
	}
	slices.SortFunc(n.items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return n, nil
}

// adoptionPlans works out, for each proposed policy, what every node it
// selects would get from each pool it draws from, the way the pool
// controller chooses (internal/allocation/assign): a proposed pool stands in for the
// stored one of its name; a new pool first holds, as its rebuild does,
// every address of its range a node carries that no holder records.
// A proposed pool its plan refuses (plans[i], of proposed[i]) stands in
// for nothing: a new one hands out nothing, as the admission or the pool
// controller refuses it, and a refused change leaves the stored pool as
// it is. Nothing is written.
func (s *snapshot) adoptionPlans(policies []nmstatev1.NodeNetworkConfigurationPolicy, proposed []ippoolv1.NodeIPPool, plans []poolPlan, n *nodes) []policyPlan {
	pools, stored, problems := s.poolsAsApplied(proposed, plans)
	choosers := map[string]*assign.Chooser{}
	for name := range problems {
		choosers[name] = nil
	}
	chooser := func(name string) (*assign.Chooser, error) {
		if c, ok := choosers[name]; ok {
			return c, problems[name]
		}
		p, ok := pools[name]
		if !ok {
			problems[name] = fmt.Errorf("NodeIPPool %s does not exist and the file does not propose it", name)
			choosers[name] = nil
			return nil, problems[name]
		}
		alloc, err := poolstatus.Allocator(p)
		if err != nil {
			// A proposed range change: the pool is rebuilt from the
			// records at their offsets in the new range.
			rng, rerr := poolstatus.Range(p)
			if rerr != nil {
				problems[name] = fmt.Errorf("NodeIPPool %s: %w", name, rerr)
				choosers[name] = nil
				return nil, problems[name]
			}
			alloc = ippool.NewAllocator(rng)
		}
		s.holdRecorded(p, alloc)
		if !stored[name] {
			holdStrays(p, alloc, n.carried)
		}
		choosers[name] = assign.New(p, alloc)
		choosers[name].Avoid(n.carriers) // as the pool controller does
		return choosers[name], nil
	}
	var out []policyPlan
	for i := range policies {
		out = append(out, s.policyPlan(&policies[i], n, pools, chooser))
	}
	return out
}

// poolsAsApplied returns the pools by name as they would be once the
// proposed ones are applied, which of them are stored, and why a new one
// its plan refuses would hand out nothing.
func (s *snapshot) poolsAsApplied(proposed []ippoolv1.NodeIPPool, plans []poolPlan) (
	pools map[string]*ippoolv1.NodeIPPool, stored map[string]bool, refused map[string]error) {
	pools, stored, refused = map[string]*ippoolv1.NodeIPPool{}, map[string]bool{}, map[string]error{}
	for i := range s.pools {
		pools[s.pools[i].Name] = s.pools[i].DeepCopy()
		stored[s.pools[i].Name] = true
	}
	for i := range proposed {
		p := proposed[i].DeepCopy()
		old, ok := pools[p.Name]
		if why := plans[i].Refusals; len(why) > 0 {
			if !ok {
				refused[p.Name] = fmt.Errorf("NodeIPPool %s as proposed would hand out nothing: %s", p.Name, strings.Join(why, "; "))
			}
			continue
		}
		if ok {
			p.Status = old.Status
		}
		pools[p.Name] = p
	}
	return pools, stored, refused
}

// holdRecorded sets the bits of the addresses the holders record from p,
// or under another pool's name inside p's range, and those IPAddresses
// the provider did not make pin, as the pool controller's rebuild does.
func (s *snapshot) holdRecorded(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) {
	audit := poolstatus.AuditPool(p.Name, alloc, poolstatus.Holders(p.Name, alloc.Range(), s.records))
	for _, ip := range append(audit.Missing, assign.Pinnable(p, alloc.Range(), audit.Pinned)...) {
		_ = alloc.AllocateIP(ip)
	}
}

// holdStrays quarantines, as a new pool's rebuild does, every address of
// its range that a node carries and nothing holds.
func holdStrays(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, carried map[string]map[netip.Addr]string) {
	for _, node := range slices.Sorted(maps.Keys(carried)) {
		for ip, iface := range carried[node] {
			if _, err := alloc.Range().Assignable(ip); err != nil || alloc.HasIP(ip) {
				continue
			}
			if alloc.AllocateIP(ip) == nil {
				poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: ip.String(), Node: node, Interface: iface})
			}
		}
	}
}

// policyPlan plans one policy on the nodes it selects.
func (s *snapshot) policyPlan(policy *nmstatev1.NodeNetworkConfigurationPolicy, n *nodes,
	pools map[string]*ippoolv1.NodeIPPool, chooser func(string) (*assign.Chooser, error)) policyPlan {
	pl := policyPlan{Policy: policy.Name}
	captures, err := capture.ParsePolicy(policy.Spec.Capture, policy.Spec.DesiredState.Raw)
	if err != nil {
		pl.Problems = append(pl.Problems, err.Error())
		return pl
	}
	if len(captures.Refs) == 0 {
		pl.Problems = append(pl.Problems, "the policy has no ippool capture: nothing to plan")
		return pl
	}
	selector := labels.SelectorFromSet(policy.Spec.NodeSelector)
	for _, pool := range captures.Pools() {
		c, err := chooser(pool)
		if err != nil {
			pl.Problems = append(pl.Problems, err.Error())
			continue
		}
		rng := c.Range()
		if err := capture.Missing(capture.Needs(policy.Spec.DesiredState.Raw, captures.RefsOf(pool)), pool,
			poolstatus.Address(pools[pool], rng, rng.Start())); err != nil {
			pl.Problems = append(pl.Problems, err.Error())
			continue
		}
		for _, node := range n.items {
			if !selector.Matches(labels.Set(node.Labels)) {
				continue
			}
			for _, ref := range captures.RefsOf(pool) {
				pl.Nodes = append(pl.Nodes, s.nodePlan(policy, ref, node.Name, n, c))
			}
		}
	}
	return pl
}

// nodePlan plans one capture of policy on node.
func (s *snapshot) nodePlan(policy *nmstatev1.NodeNetworkConfigurationPolicy, ref capture.Ref, node string, n *nodes, c *assign.Chooser) nodePlan {
	ifaces := capture.Interfaces(policy.Spec.DesiredState.Raw, ref.Capture)
	np := nodePlan{Policy: policy.Name, Capture: ref.Capture, Pool: ref.Pool, Node: node, Interfaces: ifaces}
	carried := slices.DeleteFunc(assign.OnInterfaces(n.static[node], ifaces), func(c assign.Carried) bool { return c.IP.IsLinkLocalUnicast() })
	slices.SortFunc(carried, func(a, b assign.Carried) int { return a.IP.Compare(b.IP) })
	for _, cr := range carried {
		np.Carries = append(np.Carries, cr.String())
	}
	h := holder.ForEnactment(shared.EnactmentKey(node, policy.Name).Name)
	if policy.Kind == holder.PooledPolicyKind {
		h = holder.ForPolicyNode(policy.Name, node) // its records are in its status
	}
	for i := range s.records {
		if s.records[i].Holder != h {
			continue
		}
		if ip, ok := s.records[i].For(ref); ok {
			np.Verdict, np.IP, np.Why = verdictHolds, ip.String(), "its record holds it"
			return np
		}
	}
	if _, known := n.static[node]; !known {
		np.Verdict, np.Why = verdictWaits, "it has published no NodeNetworkState: it is served once its handler publishes what it carries"
		return np
	}
	// What the node carries, as every kind adopts from it: its addresses
	// on the capture's interfaces, what other nodes carry, and what its
	// records hold already (the node's own, under another capture).
	view := assign.Carrying{ByNode: n.static, Carriers: n.carriers}
	for i := range s.records {
		if s.records[i].Node == node {
			view.Hold(node, s.records[i].Pools)
		}
	}
	cl := view.Adopting(assign.Asker{Holder: h, Node: node, Policy: policy.Name,
		Labels: func() map[string]string { return n.labels(node) }}, func(string) []string { return ifaces })
	t, err := c.Take(cl, ref.Capture)
	if err != nil {
		np.Verdict, np.Why = verdictWaits, err.Error()
		return np
	}
	np.IP = t.IP.String()
	// What the apply replaces: the addresses of the family it sets that
	// the node holds under no other record.
	replaced := slices.ContainsFunc(carried, func(c assign.Carried) bool { return c.IP.Is4() == t.IP.Is4() && (cl.Holds == nil || !cl.Holds(c.IP)) })
	np.Verdict, np.Why = outcome(t, ref.Capture, carried, replaced, ifaces)
	np.Why += passedBy(c.PassedBy(cl, n.labels))
	return np
}

// passedBy says what follows for a node from the reservations for it
// that the pool passes by, "" for none: it keeps what it is given; the
// pool says ReservationConflict while the carrier carries the address,
// and ReservationNotHeld after for a reservation by name (one by label
// selector is for whichever node it matches asks first).
func passedBy(passed []assign.Passed) string {
	if len(passed) == 0 {
		return ""
	}
	names := make([]string, 0, len(passed))
	byName := false
	for _, p := range passed {
		names = append(names, p.String())
		byName = byName || p.Node != ""
	}
	after := "reset it after to move it to its reservation"
	if byName {
		after = "ReservationNotHeld after: reset it then to move it to its reservation"
	}
	return "; its reservation " + strings.Join(names, ", ") + ": it keeps what it is given " +
		"(ReservationConflict while that node carries it, " + after + ")"
}

// outcome is the verdict on what Take handed a capture (captureName) of
// a node that carries carried on ifaces, and why; replaced tells that
// the apply replaces one of them (of the family it sets, held under no
// other record of the node).
func outcome(t assign.Taken, captureName string, carried []assign.Carried, replaced bool, ifaces []string) (verdict, why string) {
	var notes assign.Notes
	notes.Add(t, captureName)
	switch {
	case len(notes.Adopted) > 0:
		return verdictKeeps, "adopted: it already carries " + strings.Join(notes.Adopted, ", ")
	case len(notes.NotAdopted) > 0:
		return verdictRenumbered, "cannot adopt " + strings.Join(notes.NotAdopted, "; ")
	case len(notes.Returned) > 0:
		return verdictHolds, "returned: " + strings.Join(notes.Returned, ", ")
	case t.Reserved() && slices.ContainsFunc(carried, func(c assign.Carried) bool { return c.IP == t.IP }):
		return verdictKeeps, "reserved for it, and it carries it already"
	case t.Reserved() && replaced:
		return verdictRenumbered, "its reservation comes before what it carries"
	case t.Reserved():
		return verdictNew, "reserved for it"
	case len(notes.Reclaimed) > 0 && replaced:
		return verdictRenumbered, "no other address is free: it is given " + strings.Join(notes.Reclaimed, ", ")
	case len(notes.Reclaimed) > 0:
		return verdictNew, "no other address is free: it is given " + strings.Join(notes.Reclaimed, ", ")
	case len(carried) == 0:
		return verdictNew, "it carries no address on " + listOr(ifaces, "the interface (the template names none)")
	}
	return verdictNew, "what it carries on " + strings.Join(ifaces, ", ") +
		" is not this capture's: another family's, or the node's under another capture or record"
}

func (n *nodes) labels(node string) map[string]string {
	for _, it := range n.items {
		if it.Name == node {
			return it.Labels
		}
	}
	return nil
}

func listOr(names []string, none string) string {
	if len(names) == 0 {
		return none
	}
	return strings.Join(names, ", ")
}

func (p printer) policyPlans(plans []policyPlan) error {
	for i, pl := range plans {
		if i > 0 {
			fmt.Fprintln(p.w)
		}
		keeps, renumbered := 0, 0
		for _, np := range pl.Nodes {
			switch np.Verdict {
			case verdictKeeps, verdictHolds:
				keeps++
			case verdictRenumbered:
				renumbered++
			}
		}
		fmt.Fprintf(p.w, "NodeNetworkConfigurationPolicy %s: %d node captures, %d keep their address, %d renumbered\n",
			pl.Policy, len(pl.Nodes), keeps, renumbered)
		for _, prob := range pl.Problems {
			fmt.Fprintf(p.w, "  ! %s\n", prob)
		}
		if len(pl.Nodes) == 0 {
			continue
		}
		tw := p.table()
		fmt.Fprintln(tw, "NODE\tCAPTURE\tPOOL\tCARRIES\tIP\tOUTCOME")
		for _, np := range pl.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s: %s\n", np.Node, np.Capture, np.Pool, dash(strings.Join(np.Carries, ", ")),
				dash(np.IP), np.Verdict, np.Why)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

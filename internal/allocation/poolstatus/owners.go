package poolstatus

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// Owner is one holder of an address, and where it uses the address.
type Owner struct {
	Holder holder.Ref `json:"holder"`
	// Pool is the pool the holder records the address under; another
	// pool's name when the pools overlap.
	Pool   string `json:"pool,omitempty"`
	Node   string `json:"node,omitempty"`
	Policy string `json:"policy,omitempty"`
	// Capture is the capture whose state holds the address; empty if none.
	Capture string `json:"capture,omitempty"`
	// Interface is the interface of the enactment's desired state that
	// carries the address; empty if none does.
	Interface string `json:"interface,omitempty"`
	// Unrecognized: the holder is an IPAddress this provider did not make
	// for a claim (holder.IPAddress). It keeps the address from being
	// handed out, and holds it against nobody: it never collides, never
	// keeps a quarantine, a reservation or a range change from going.
	Unrecognized bool `json:"unrecognized,omitempty"`

	// from and ip let an owner collected by Holders find its Capture and
	// Interface when a message needs them.
	from *nncev1beta1.NodeNetworkConfigurationEnactment
	ip   netip.Addr
}

// detailed returns the owner with its Capture and Interface, found in its
// enactment if Holders left them out.
func (o Owner) detailed() Owner {
	if o.from == nil {
		return o
	}
	o.Capture, o.Interface = capturesByIP(o.from)[o.ip], netstate.Carriers(o.from.Status.DesiredState.Raw)[o.ip]
	o.from = nil
	return o
}

// String describes the owner for messages: "node n1 and interface eth1
// (enactment n1.p)".
func (o Owner) String() string { return o.Describe(o.Pool) }

// Describe describes the owner for a message about pool, naming the pool
// the owner records the address under when it is another one: "node n1
// and interface eth1 (enactment n1.p, NodeIPPool other)".
func (o Owner) Describe(pool string) string {
	o = o.detailed()
	var b strings.Builder
	switch h := o.Holder; h.Kind {
	case holder.PolicyNode:
		b.WriteString("node " + h.Node)
		if o.Capture != "" {
			b.WriteString(" and capture " + o.Capture)
		}
		b.WriteString(" (" + holder.PooledPolicyKind + " " + h.Name)
		if o.Pool != "" && o.Pool != pool {
			b.WriteString(", NodeIPPool " + o.Pool)
		}
		b.WriteString(")")
		return b.String()
	case holder.IPAddress:
		return h.Title()
	case holder.Claim:
		b.WriteString(h.Title())
		if o.Pool != "" && o.Pool != pool {
			b.WriteString(" (NodeIPPool " + o.Pool + ")")
		}
		return b.String()
	}
	b.WriteString("node " + cmp.Or(o.Node, "?"))
	switch {
	case o.Interface != "":
		b.WriteString(" and interface " + o.Interface)
	case o.Capture != "":
		b.WriteString(" and capture " + o.Capture)
	}
	b.WriteString(" (enactment " + o.Holder.Name)
	if o.Pool != "" && o.Pool != pool {
		b.WriteString(", NodeIPPool " + o.Pool)
	}
	b.WriteString(")")
	return b.String()
}

// Remedy is the command that takes the address from this holder, for a
// message about pool: reset an enactment's record or a pooled policy's
// node (on the policy generated for it), or delete a claim (whose
// infrastructure provider asks again).
func (o Owner) Remedy(pool string) string {
	switch h := o.Holder; h.Kind {
	case holder.PolicyNode:
		return fmt.Sprintf("kubectl annotate nncp %s %s=%s", ippoolv1.NodePolicyName(h.Name, h.Node),
			ippoolv1.ResetIPPoolAnnotation, cmp.Or(o.Pool, pool))
	case holder.Claim:
		return fmt.Sprintf("kubectl -n %s delete ipaddressclaim %s", h.Namespace, h.Name)
	case holder.IPAddress:
		return fmt.Sprintf("kubectl -n %s delete ipaddress %s", h.Namespace, h.Name)
	}
	return fmt.Sprintf("kubectl annotate nnce %s %s=%s", o.Holder.Name, ippoolv1.ResetIPPoolAnnotation, cmp.Or(o.Pool, pool))
}

// Owners maps every address that holders record on one pool to its
// owners, sorted by holder.
type Owners map[netip.Addr][]Owner

// OwnersOf collects the owners of the addresses of pool from records:
// every address recorded under the pool's name, and every address
// recorded under another pool's name that lies within rng (overlapping
// pools, a deleted pool whose holders still carry its addresses). Uniqueness is cluster-wide, so a
// pool never hands out an address another pool's record holds. A nil rng
// collects the pool's own records only. Unparseable addresses are ignored:
// no bit can stand for them.
func OwnersOf(pool string, rng *ippool.Range, records []holder.Record) Owners {
	return ownersOf(pool, rng, records, true)
}

// Holders is OwnersOf without where in its enactment each owner uses the
// address (Capture and Interface of enactments are left out, and found
// only when an owner is described): it parses no YAML, for the decisions a
// controller takes at every reconcile of a pool with a thousand holders.
// The records must not change while the owners are used.
func Holders(pool string, rng *ippool.Range, records []holder.Record) Owners {
	return ownersOf(pool, rng, records, false)
}

func ownersOf(pool string, rng *ippool.Range, records []holder.Record, detailed bool) Owners {
	c := Owners{}
	for i := range records {
		r := &records[i]
		var captures, interfaces map[netip.Addr]string
		for _, name := range slices.Sorted(maps.Keys(r.Pools)) {
			for _, s := range r.Pools[name].Held() {
				ip, err := netip.ParseAddr(s)
				if err != nil || !concerns(pool, rng, name, ip) || c.HeldBy(ip, r.Holder) {
					continue
				}
				o := Owner{Holder: r.Holder, Pool: name, Node: r.Node, Policy: r.Policy,
					Capture: r.Captures[ip], Unrecognized: r.Holder.Kind == holder.IPAddress}
				switch e := r.Enactment; {
				case e == nil:
				case detailed:
					if captures == nil {
						captures, interfaces = capturesByIP(e), netstate.Carriers(e.Status.DesiredState.Raw)
					}
					o.Capture, o.Interface = captures[ip], interfaces[ip]
				default:
					o.from, o.ip = e, ip
				}
				c[ip] = append(c[ip], o)
			}
		}
	}
	for _, owners := range c {
		slices.SortFunc(owners, func(a, b Owner) int { return strings.Compare(a.Holder.String(), b.Holder.String()) })
	}
	return c
}

// concerns reports whether a record of ip under recordPool is a claim on
// pool: its own records always, others' when ip lies within rng.
func concerns(pool string, rng *ippool.Range, recordPool string, ip netip.Addr) bool {
	if recordPool == pool {
		return true
	}
	if rng == nil {
		return false
	}
	_, err := rng.Offset(ip)
	return err == nil
}

// Recognized returns the owners of ip that hold it as records do: all but
// the unrecognized IPAddresses.
func (c Owners) Recognized(ip netip.Addr) []Owner {
	owners := c[ip]
	if !slices.ContainsFunc(owners, func(o Owner) bool { return o.Unrecognized }) {
		return owners
	}
	return slices.DeleteFunc(slices.Clone(owners), func(o Owner) bool { return o.Unrecognized })
}

// Unrecognized returns, in order, the addresses that unrecognized
// IPAddresses name, with the owners of each.
func (c Owners) Unrecognized() []netip.Addr {
	var out []netip.Addr
	for _, ip := range c.Addrs() {
		if slices.ContainsFunc(c[ip], func(o Owner) bool { return o.Unrecognized }) {
			out = append(out, ip)
		}
	}
	return out
}

// HeldBy returns whether h claims ip.
func (c Owners) HeldBy(ip netip.Addr, h holder.Ref) bool {
	return slices.ContainsFunc(c[ip], func(o Owner) bool { return o.Holder == h })
}

// Addrs returns the claimed addresses in order.
func (c Owners) Addrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(c))
	for ip := range c {
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// capturesByIP maps the addresses of an enactment's captured states to
// their capture names.
func capturesByIP(e *nncev1beta1.NodeNetworkConfigurationEnactment) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, name := range slices.Sorted(maps.Keys(e.Status.CapturedStates)) {
		if addr, ok := capture.ParseState(e.Status.CapturedStates[name].State.Raw); ok {
			if _, seen := out[addr.IP]; !seen {
				out[addr.IP] = name
			}
		}
	}
	return out
}

// MaxUnclaimedListed bounds Audit.Unclaimed, so that an audit's work grows
// with the bitmap's runs and the owners, never with the offsets a run spans.
const MaxUnclaimedListed = 4096

// Audit compares a pool's bitmap with the owners of its addresses.
type Audit struct {
	// Missing are claimed addresses the range hands out whose bit is not
	// set: the Indexed invariant is broken and the pool needs a rebuild.
	Missing []netip.Addr
	// Unclaimed are set offsets that no holder claims: allocations in
	// flight, quarantined addresses, or leaks for garbage collection. At
	// most MaxUnclaimedListed are listed, the lowest first; UnclaimedCount
	// counts them all.
	Unclaimed      []uint64
	UnclaimedCount uint64
	// Outside are addresses recorded under this pool's name that the range
	// does not hand out (the pool was re-created smaller, or with new
	// excludes).
	Outside []netip.Addr
	// Collisions are addresses claimed by more than one owner that is no
	// unrecognized IPAddress.
	Collisions []netip.Addr
	// Pinned are addresses of the range that only unrecognized IPAddresses
	// name and whose bits are clear: they are set by the next write, which
	// needs no rebuild (nobody's record lacks its bit).
	Pinned []netip.Addr
}

// Consistent reports whether the bitmap is exactly the claimed set and no
// address is claimed twice.
func (a Audit) Consistent() bool {
	return len(a.Missing) == 0 && a.UnclaimedCount == 0 && len(a.Outside) == 0 && len(a.Collisions) == 0 && len(a.Pinned) == 0
}

// AuditPool compares alloc, the bitmap of pool, with owners. Every list is
// sorted. Its work grows with the runs of the bitmap and the owners.
func AuditPool(pool string, alloc *ippool.Allocator, owners Owners) Audit {
	var a Audit
	var claimed []uint64
	rng := alloc.Range()
	for _, ip := range owners.Addrs() {
		recognized := owners.Recognized(ip)
		if len(recognized) > 1 {
			a.Collisions = append(a.Collisions, ip)
		}
		off, err := rng.Assignable(ip)
		if err != nil {
			if slices.ContainsFunc(recognized, func(o Owner) bool { return o.Pool == pool }) {
				a.Outside = append(a.Outside, ip)
			}
			continue
		}
		claimed = append(claimed, off)
		switch {
		case alloc.Has(off):
		case len(recognized) == 0:
			a.Pinned = append(a.Pinned, ip)
		default:
			a.Missing = append(a.Missing, ip)
		}
	}
	slices.Sort(claimed)
	a.Unclaimed, a.UnclaimedCount = unclaimedOffsets(alloc, claimed)
	return a
}

// unclaimedOffsets lists the lowest MaxUnclaimedListed set offsets not in
// claimed (sorted) and counts them all, run by run.
func unclaimedOffsets(alloc *ippool.Allocator, claimed []uint64) ([]uint64, uint64) {
	var listed []uint64
	var count uint64
	for first, last := range alloc.Runs() {
		lo, _ := slices.BinarySearch(claimed, first)
		hi, found := slices.BinarySearch(claimed, last)
		if found {
			hi++
		}
		inRun := claimed[lo:hi]
		count += last - first + 1 - uint64(len(inRun))
		for off, j := first, 0; len(listed) < MaxUnclaimedListed; off++ {
			for j < len(inRun) && inRun[j] < off {
				j++
			}
			if j >= len(inRun) || inRun[j] != off {
				listed = append(listed, off)
			}
			if off == last {
				break
			}
		}
	}
	return listed, count
}

// CollisionMessage describes the collisions for the IPCollision condition,
// in the specification's words, and says how to resolve them.
func CollisionMessage(pool string, owners Owners, collisions []netip.Addr) string {
	parts := make([]string, 0, len(collisions))
	for _, ip := range collisions {
		owners := owners.Recognized(ip)
		others := make([]string, 0, len(owners)-1)
		for _, o := range owners[1:] {
			others = append(others, o.Describe(pool))
		}
		parts = append(parts, fmt.Sprintf("The IP address %s at %s is colliding with %s", ip, owners[0].Describe(pool), strings.Join(others, " and ")))
	}
	last := owners.Recognized(collisions[len(collisions)-1])
	holder := last[len(last)-1]
	return strings.Join(parts, "; ") + "; reset all but one holder, e.g. " + holder.Remedy(pool)
}

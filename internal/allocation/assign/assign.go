// Package assign decides which address of a pool a capture gets. Every
// writer that hands out addresses uses it, for every kind of holder (the
// pool controller serving enactments and pooled policies' nodes, a
// handler allocating itself, the claim controller), so they follow the
// same order:
//
//  1. the address kept for the asker's return: the same holder (its
//     node re-added under the same name, its policy matching the node
//     again) asking for the same capture gets back the address it held:
//     from status.quarantined for as long as it is quarantined (its node
//     may still carry it; its in-flight entry names the quarantine, so a
//     return that is not recorded goes back to it), from
//     status.keptForReturn (free, kept last for others) once its Node was
//     deleted, until the quarantine period has passed since it was kept;
//  2. a free address the pool reserves for the asker's node
//     (spec.reservations, by node name or label selector, optionally for
//     one policy), in the order the reservations are listed;
//  3. an address the asker's node already carries on an interface the
//     capture's template puts its address on (Asker.Carried), the
//     lowest first, when the range hands it out and no one else holds,
//     reserves or carries it: the node keeps it (adoption, see
//     Chooser.adopt), and its network does not change;
//  4. the lowest free address that no reservation holds for another node
//     and that is not kept for another node's return;
//  5. when no such address is left, the address kept longest for another
//     node's return that no node's network carries: a pool never refuses a
//     node for the sake of a node that may not come back.
//
// An address that another node's network carries (Avoid) is handed out by
// none of these steps, whoever it is returned, kept or reserved for: only
// its carrier adopts it (step 3). Otherwise one address would be on two
// NICs until the carrier took it off, and nothing says it will (a node
// whose record was lost, an address set by hand, a machine whose Node was
// deleted while it runs).
//
// A Chooser works on the pool and allocator of one pool write: it keeps the
// free reserved and kept addresses out of the allocator's reach while it
// works, and Done gives them back before the allocator is written. It is not
// safe for concurrent use.
package assign

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Asker is the holder an address is chosen for, of any kind: an
// enactment, a pooled policy's node, or a Cluster API IPAddressClaim.
type Asker struct {
	// Holder is the holder that will record the address.
	Holder holder.Ref
	// Node and Policy are the node and the policy the address is applied
	// for; empty for a Cluster API IPAddressClaim, which names no node.
	Node, Policy string
	// Labels returns the node's labels; it is called only when the pool
	// has a reservation by label selector. Nil, or a nil result, matches no
	// selector.
	Labels func() map[string]string
	// Carried returns the addresses the node carries, as its
	// NodeNetworkState shows them, on the interfaces the capture's
	// template puts its address on: the candidates for adoption. Nil
	// means none.
	Carried func(captureName string) []Carried
	// CarriedElsewhere returns a node other than the asker's that
	// carries ip, or "". Nil means none is known to: only an address the
	// pool holds for the asker's node (found unrecorded on it) is then
	// adopted, never a free one.
	CarriedElsewhere func(ip netip.Addr) string
	// Holds reports whether another record of the asker's node holds ip
	// (another policy's, or this one's being released): such a carried
	// address is the node's already, neither adopted nor reported. Nil
	// means none does.
	Holds func(ip netip.Addr) bool
}

// Taken is one address a Chooser handed out.
type Taken struct {
	IP     netip.Addr
	offset uint64
	// returned is set when the address came back from quarantine, kept
	// when it was kept for a return: the entry it came from, to restore on
	// Give. reclaimed tells that kept was another node's.
	returned  *ippoolv1.QuarantinedAddress
	kept      *ippoolv1.KeptAddress
	reclaimed bool
	// reserved is set when the address was a free reservation.
	reserved bool
	// adopted is set when the asker's node carried the address, and
	// stray is then the entry that held it for that node (found carried
	// and unrecorded), to restore on Give; nil when it was free.
	adopted *Carried
	stray   *ippoolv1.QuarantinedAddress
	// avoided holds the carriers of an adopted address Avoid kept out of
	// reach, to keep it so again on Give.
	avoided []string
	// notAdopted describes what the node carries that it could not keep.
	notAdopted []string
	// unconfirmed is set when one of those is set in the pool and no
	// entry holds it (see Unconfirmed).
	unconfirmed bool
}

// Unconfirmed reports whether the asker's node carries, on an
// interface the capture configures, an address that the chooser did not
// adopt only because the pool has it set and no entry holds it, or holds
// it in flight to the asker's own holder (under its token: a serve in
// progress, whose record lands under that token; or under another: a
// pass for an earlier incarnation of the holder, as in a status restored
// from a backup). A holder's record may name it, or none may (a record
// lost, a status restored without its holders' records), and then it is
// the node's. Only a writer that reads every holder's records can tell
// which; one that cannot (a self-allocating handler) asks the pool
// controller rather than hand the node a new address, which would
// renumber it. The pool controller gives the address back once no entry
// holds it (an entry under a dead token is settled within the grace
// period) if no record names it and no other node carries it, and
// serves another address otherwise.
func (t Taken) Unconfirmed() bool { return t.unconfirmed }

// Reserved reports whether the address was a free reservation for the
// asker, which comes before any address its node carries.
func (t Taken) Reserved() bool { return t.reserved }

// Passed is a reservation for an asker that Take passes by because
// another node carries its address.
type Passed struct {
	Reservation
	// Carrier is the node whose network carries the address.
	Carrier string
}

// String describes the reservation passed by: "10.0.0.5 (node w2
// carries it)".
func (p Passed) String() string {
	return fmt.Sprintf("%s (node %s carries it)", p.IP, p.Carrier)
}

// PassedBy returns the reservations for cl that Take passes by because
// a node they are not for carries their address: free and carried
// (Avoid), or held as that node's stray (quarantined for it, no holder
// named). cl is served another address and keeps it; the pool says
// ReservationConflict while the carrier carries it. labelsOf returns
// another node's labels (nil if unknown): a carrier that a reservation by
// label selector matches too is one of the nodes the reservation is for,
// and adopts the address, so that reservation is not passed by for cl,
// as the pool controller counts no conflict for it either.
func (c *Chooser) PassedBy(cl Asker, labelsOf func(node string) map[string]string) []Passed {
	var out []Passed
	for _, r := range c.reservations {
		if !r.Matches(cl.Node, cl.Policy, cl.Labels) {
			continue
		}
		other := ""
		if c.blocked[r.Offset] {
			other = c.carriedElsewhere(r.Offset, cl.Node)
		} else if q := poolstatus.QuarantineOf(c.pool, r.IP.String()); q != nil && q.HolderName() == "" && q.Node != cl.Node {
			other = q.Node
		}
		if other == "" || r.Node == "" && r.Matches(other, r.Policy, func() map[string]string { return labelsOf(other) }) {
			continue
		}
		out = append(out, Passed{Reservation: r, Carrier: other})
	}
	return out
}

// Chooser hands out the addresses of one pool write.
type Chooser struct {
	pool         *ippoolv1.NodeIPPool
	alloc        *ippool.Allocator
	reservations []Reservation
	// blocked are the free reserved offsets the chooser marked allocated
	// so that AllocateNext passes them by.
	blocked map[uint64]bool
	// kept are the free offsets kept for a return that the chooser marked
	// allocated, longest kept first; a handed-out one is removed.
	kept []keptOffset
	// adopted are the offsets handed out by adoption in this write, to the
	// node: its second capture does not report them as held.
	adopted map[uint64]string
	// avoided are the free offsets that nodes' networks carry (Avoid),
	// with their carriers, which the chooser marked allocated so that
	// AllocateNext passes them by: only their carrier adopts one.
	avoided map[uint64][]string
	// carriedBy are the offsets that nodes' networks carry (Avoid), with
	// their carriers, whatever the pool makes of them: handed to no asker
	// of another node, and a kept one reclaimed for no other holder.
	carriedBy map[uint64][]string
}

// keptOffset is a free address kept for its holder's return.
type keptOffset struct {
	offset uint64
	entry  ippoolv1.KeptAddress
}

// New returns a Chooser over pool (a fresh copy the caller writes) and its
// allocator. Call Done before the allocator is written.
func New(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) *Chooser {
	c := &Chooser{pool: pool, alloc: alloc, blocked: map[uint64]bool{}, adopted: map[uint64]string{}, avoided: map[uint64][]string{},
		carriedBy: map[uint64][]string{}}
	c.reservations, _ = Reservations(pool, alloc.Range())
	for _, r := range c.reservations {
		if !alloc.Has(r.Offset) && alloc.Allocate(r.Offset) == nil {
			c.blocked[r.Offset] = true
		}
	}
	kept := slices.Clone(pool.Status.KeptForReturn)
	slices.SortStableFunc(kept, func(a, b ippoolv1.KeptAddress) int { return a.Since.Compare(b.Since.Time) })
	for _, k := range kept {
		ip, err := netip.ParseAddr(k.IP)
		if err != nil {
			continue
		}
		off, err := alloc.Range().Assignable(ip)
		if err == nil && !alloc.Has(off) && alloc.Allocate(off) == nil {
			c.kept = append(c.kept, keptOffset{offset: off, entry: k})
		}
	}
	return c
}

// Range returns the range of the pool.
func (c *Chooser) Range() *ippool.Range { return c.alloc.Range() }

// Avoid keeps the addresses that carriers (CarriersOf: an address to the
// nodes whose networks show it) shows carried out of every asker's reach
// but their carrier's: a node's address that no record holds (a state
// published after the pool's rebuild, as after a restore; an address set
// by hand; the machine of a deleted Node) is not handed to another node,
// which would put it on two NICs. That holds for a free address, which
// only its carrier may adopt, and for one quarantined, kept or reserved
// for a holder of another node, which that holder does not get back while
// the carrier shows it; a kept address a node's network carries is
// reclaimed for no other holder either. Call it before the first Take.
func (c *Chooser) Avoid(carriers map[netip.Addr][]string) {
	rng := c.alloc.Range()
	for ip, nodes := range carriers {
		off, err := rng.Assignable(ip)
		if err != nil || len(nodes) == 0 {
			continue
		}
		c.carriedBy[off] = nodes
		if !c.alloc.Has(off) && c.alloc.Allocate(off) == nil {
			c.avoided[off] = nodes
		}
	}
}

// carriedElsewhere returns a node other than node whose network carries
// the address at off (Avoid), or "".
func (c *Chooser) carriedElsewhere(off uint64, node string) string {
	for _, n := range c.carriedBy[off] {
		if n != node {
			return n
		}
	}
	return ""
}

// Done gives the free reserved, kept and avoided addresses back to the
// allocator. The Chooser must not be used after.
func (c *Chooser) Done() {
	for off := range c.blocked {
		_ = c.alloc.Release(off)
	}
	for _, k := range c.kept {
		_ = c.alloc.Release(k.offset)
	}
	for off := range c.avoided {
		_ = c.alloc.Release(off)
	}
	c.blocked, c.kept, c.avoided = nil, nil, nil
}

// Take chooses and allocates an address for the capture of the asker.
// It fails with an error wrapping ippool.ErrFull when no address is left
// for it; nothing changes then.
func (c *Chooser) Take(cl Asker, captureName string) (Taken, error) {
	rng := c.alloc.Range()
	if q := c.returning(cl, captureName); q != nil {
		// The in-flight entry names the quarantine (Taken.InFlight): a
		// return that is not recorded goes back to it.
		ip, _ := netip.ParseAddr(q.IP)
		entry := *q
		poolstatus.RemoveQuarantine(c.pool, q.IP)
		off, _ := rng.Offset(ip)
		return Taken{IP: ip, offset: off, returned: &entry}, nil
	}
	if i := slices.IndexFunc(c.kept, func(k keptOffset) bool {
		return k.entry.HolderName() == cl.Holder.String() && k.entry.Capture == captureName && c.carriedElsewhere(k.offset, cl.Node) == ""
	}); i >= 0 {
		return c.takeKept(i, false), nil
	}
	for _, r := range c.reservations {
		if c.blocked[r.Offset] && r.Matches(cl.Node, cl.Policy, cl.Labels) && c.carriedElsewhere(r.Offset, cl.Node) == "" {
			delete(c.blocked, r.Offset)
			return Taken{IP: r.IP, offset: r.Offset, reserved: true}, nil
		}
	}
	t, ok := c.adopt(cl, captureName)
	if ok {
		return t, nil
	}
	off, err := c.alloc.AllocateNext()
	if i := c.reclaimable(); errors.Is(err, ippool.ErrFull) && i >= 0 {
		k := c.takeKept(i, true)
		k.notAdopted, k.unconfirmed = t.notAdopted, t.unconfirmed
		return k, nil
	}
	if errors.Is(err, ippool.ErrFull) {
		full := c.fullError(err, cl, captureName)
		full.Unconfirmed = t.unconfirmed
		return Taken{}, full
	}
	if err != nil {
		return Taken{}, err
	}
	ip, _ := rng.IP(off)
	return Taken{IP: ip, offset: off, notAdopted: t.notAdopted, unconfirmed: t.unconfirmed}, nil
}

// FullError is the allocator's ippool.ErrFull for an asker, with how
// many free addresses it could not have: Reserved for other nodes, and
// Carried by other nodes' networks (Avoid). Unconfirmed is
// Taken.Unconfirmed of the capture that found none: its node carries an
// address that only the holders' records can tell is its own.
type FullError struct {
	Err               error
	Reserved, Carried int
	Unconfirmed       bool
}

func (e *FullError) Error() string {
	more := e.More()
	if more == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + " (" + more + ")"
}

func (e *FullError) Unwrap() error { return e.Err }

// More says which free addresses the asker could not have, or "".
func (e *FullError) More() string {
	var more []string
	if e.Reserved > 0 {
		more = append(more, fmt.Sprintf("%d more are reserved for other nodes", e.Reserved))
	}
	if e.Carried > 0 {
		more = append(more, fmt.Sprintf("%d more are carried by nodes' networks and recorded by no holder", e.Carried))
	}
	return strings.Join(more, "; ")
}

// fullError wraps err (ippool.ErrFull) as a FullError for the capture of
// cl: a free address reserved for another asker counts as Reserved; one
// carried by a node's network (avoided; reserved for cl, or kept for
// anyone's return; or quarantined for cl's return) as Carried, which may
// be free for cl once the carrier takes it off.
func (c *Chooser) fullError(err error, cl Asker, captureName string) *FullError {
	full := &FullError{Err: err, Carried: len(c.avoided)}
	for _, r := range c.reservations {
		switch {
		case !c.blocked[r.Offset]:
		case r.Matches(cl.Node, cl.Policy, cl.Labels) && c.carriedElsewhere(r.Offset, cl.Node) != "":
			full.Carried++
		default:
			full.Reserved++
		}
	}
	for _, k := range c.kept {
		if len(c.carriedBy[k.offset]) > 0 {
			full.Carried++
		}
	}
	for _, q := range c.pool.Status.Quarantined {
		if q.Capture != captureName || holder.Parse(q.HolderName()) != cl.Holder {
			continue
		}
		if ip, err := netip.ParseAddr(q.IP); err == nil {
			if off, err := c.alloc.Range().Offset(ip); err == nil && c.carriedElsewhere(off, cl.Node) != "" {
				full.Carried++
			}
		}
	}
	return full
}

// reclaimable returns the index of the longest kept address that may be
// reclaimed for another holder: one no node's network carries (its
// carrier's own would be a second NIC of its machine); -1 if none.
func (c *Chooser) reclaimable() int {
	return slices.IndexFunc(c.kept, func(k keptOffset) bool { return len(c.carriedBy[k.offset]) == 0 })
}

// InFlight returns the in-flight entry of t, taken for enactment under
// token: it names the quarantine a returned address came from, or the
// hold an adopted one came from (held for the node that carries it), and
// the kept entry a kept one came from, so that an address given back
// unrecorded goes back where it came from.
func (t Taken) InFlight(h holder.Ref, token string, since metav1.Time) ippoolv1.InFlightAddress {
	return ippoolv1.InFlightAddress{IP: t.IP.String(), Holder: h.String(), Token: token, Since: since,
		Returning: cmp.Or(t.returned, t.stray), Kept: t.kept}
}

// Give undoes a Take whose address will not be written after all.
func (c *Chooser) Give(t Taken) {
	switch {
	case t.returned != nil:
		poolstatus.AddQuarantine(c.pool, *t.returned)
	case t.kept != nil:
		poolstatus.AddKept(c.pool, *t.kept)
		k := keptOffset{offset: t.offset, entry: *t.kept}
		i, _ := slices.BinarySearchFunc(c.kept, k, func(a, b keptOffset) int { return a.entry.Since.Compare(b.entry.Since.Time) })
		c.kept = slices.Insert(c.kept, i, k)
	case t.adopted != nil:
		delete(c.adopted, t.offset)
		switch {
		case t.stray != nil:
			poolstatus.AddQuarantine(c.pool, *t.stray)
		case t.avoided != nil:
			c.avoided[t.offset] = t.avoided
		default:
			_ = c.alloc.Release(t.offset)
		}
	case t.reserved:
		c.blocked[t.offset] = true
	default:
		_ = c.alloc.Release(t.offset)
	}
}

// returning returns the quarantine entry kept for the return of the
// asker's capture, or nil. Only an address the allocator holds, and that
// no node but the asker's carries, is handed back.
func (c *Chooser) returning(cl Asker, captureName string) *ippoolv1.QuarantinedAddress {
	for i := range c.pool.Status.Quarantined {
		q := &c.pool.Status.Quarantined[i]
		if q.Capture == "" || q.Capture != captureName || holder.Parse(q.HolderName()) != cl.Holder {
			continue
		}
		ip, err := netip.ParseAddr(q.IP)
		if err != nil || !c.alloc.HasIP(ip) || poolstatus.InFlightOf(c.pool, q.IP) != nil {
			continue
		}
		if off, err := c.alloc.Range().Offset(ip); err == nil && c.carriedElsewhere(off, cl.Node) == "" {
			return q
		}
	}
	return nil
}

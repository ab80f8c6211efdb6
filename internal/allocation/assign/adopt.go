package assign

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// Adoption (step 3 of the package's order): a capture's first address may
// be one its node already carries. The writers describe what the nodes
// carry with the helpers below, from the NodeNetworkStates, so that both
// choose from the same view.

// Carried is an address a node carries on an interface.
type Carried struct {
	IP        netip.Addr
	Interface string
}

func (c Carried) String() string { return c.IP.String() + " on " + c.Interface }

// AdoptedMessage is the note of the AddressAdopted Event.
func AdoptedMessage(pool string, adopted []string) string {
	return fmt.Sprintf("NodeIPPool %s adopted %s: the node already carried it, so its network does not change",
		pool, strings.Join(adopted, ", "))
}

// NotAdoptedMessage is the note of the AddressNotAdopted Event, and of
// the enactment's condition.
func NotAdoptedMessage(pool string, notAdopted []string) string {
	return fmt.Sprintf("NodeIPPool %s could not adopt what the node carries: %s; the capture's address from the pool replaces it at the next apply",
		pool, strings.Join(notAdopted, "; "))
}

// adopt hands out an address the asker's node carries on an interface
// the capture's template configures, the lowest first: one the pool holds
// for that node because it was found there unrecorded (a stray, see the
// pool controller's rebuild), or a free one no other node carries. An
// address held, reserved or kept for anyone else, excluded, outside the
// range or the gateway is not adopted, and the returned Taken (ok false)
// describes why, for the node to be told.
func (c *Chooser) adopt(cl Asker, captureName string) (Taken, bool) {
	if cl.Carried == nil {
		return Taken{}, false
	}
	rng := c.alloc.Range()
	candidates := slices.SortedFunc(slices.Values(cl.Carried(captureName)), func(a, b Carried) int { return a.IP.Compare(b.IP) })
	var refused []string
	unconfirmed := false
	for _, cand := range candidates {
		ip := cand.IP
		if ip.Is4() != rng.Start().Is4() || ip.IsLinkLocalUnicast() {
			continue // another family's, or the link's own
		}
		off, err := rng.Assignable(ip)
		if err == nil && c.adopted[off] == cl.Node {
			continue // another capture of the node adopted it
		}
		why := c.refusal(cl, ip, off, err)
		if why == ownAddress {
			continue
		}
		if why != "" {
			refused = append(refused, fmt.Sprintf("%s (%s)", cand, why))
			unconfirmed = unconfirmed || c.onlyRecordsTell(cl, ip, why)
			continue
		}
		t := Taken{IP: ip, offset: off, adopted: &cand}
		if q := poolstatus.QuarantineOf(c.pool, ip.String()); q != nil {
			entry := *q
			t.stray = &entry
			poolstatus.RemoveQuarantine(c.pool, q.IP)
		} else if nodes, avoided := c.avoided[off]; avoided {
			t.avoided = nodes // allocated by Avoid already
			delete(c.avoided, off)
		} else if c.alloc.Allocate(off) != nil {
			continue
		}
		c.adopted[off] = cl.Node
		return t, true
	}
	return Taken{notAdopted: refused, unconfirmed: unconfirmed}, false
}

// setUnheld is the refusal of an address the pool has set with no entry
// holding it (Taken.Unconfirmed).
const setUnheld = "another holder has it"

// handedTo is the refusal of an address in flight to holder.
func handedTo(holder string) string { return "it is being handed to " + holder }

// onlyRecordsTell reports whether why, the refusal of ip to the
// asker, is one that only every holder's records settle
// (Taken.Unconfirmed): ip is set with no entry holding it, or in flight
// to the asker's own holder with nothing else holding it (a
// quarantine of its release makes it the holder's own, on its way back).
func (c *Chooser) onlyRecordsTell(cl Asker, ip netip.Addr, why string) bool {
	switch why {
	case setUnheld:
		return true
	case handedTo(cl.Holder.String()):
		return poolstatus.QuarantineOf(c.pool, ip.String()) == nil && poolstatus.KeptOf(c.pool, ip.String()) == nil
	}
	return false
}

// ownAddress is the refusal of an address the asker's node holds or
// releases under another record: not the node's to adopt, and nothing to
// tell it.
const ownAddress = "held by the node"

// refusal says why the asker may not adopt ip (at off; err is the
// range's verdict on it), or "".
func (c *Chooser) refusal(cl Asker, ip netip.Addr, off uint64, err error) string {
	rng := c.alloc.Range()
	if cl.Holds != nil && cl.Holds(ip) {
		return ownAddress
	}
	switch {
	case ip == rng.Gateway():
		return "it is the pool's gateway"
	case errors.Is(err, ippool.ErrExcluded):
		return fmt.Sprintf("it is excluded from the range %s-%s", rng.Start(), rng.End())
	case err != nil:
		return fmt.Sprintf("it is outside the range %s-%s", rng.Start(), rng.End())
	}
	if other := c.carriedElsewhere(off, cl.Node); other != "" {
		// Whatever the pool keeps it for (a reservation, a hold for
		// this node): not while another node shows it (Avoid).
		return fmt.Sprintf("node %s carries it too", other)
	}
	for _, r := range c.reservations {
		if r.IP == ip && !r.Matches(cl.Node, cl.Policy, cl.Labels) {
			return "it is reserved for " + r.Describe()
		}
	}
	if slices.ContainsFunc(c.kept, func(k keptOffset) bool { return k.offset == off }) {
		k := c.kept[slices.IndexFunc(c.kept, func(k keptOffset) bool { return k.offset == off })]
		return "it is kept for the return of " + k.entry.HolderName()
	}
	if f := poolstatus.InFlightOf(c.pool, ip.String()); f != nil {
		return handedTo(f.HolderName())
	}
	if q := poolstatus.QuarantineOf(c.pool, ip.String()); q != nil {
		if q.HolderName() == "" && q.Node == cl.Node {
			return ""
		}
		if q.HolderName() != "" && q.Node == cl.Node {
			return ownAddress // released by the node: it comes off
		}
		if q.HolderName() != "" {
			return fmt.Sprintf("it was released from %s and is quarantined until node %s shows it gone", q.HolderName(), q.Node)
		}
		return fmt.Sprintf("node %s carries it too", q.Node)
	}
	if _, avoided := c.avoided[off]; c.alloc.Has(off) && !avoided {
		return setUnheld
	}
	if cl.CarriedElsewhere == nil {
		return "no other node's network is known, so it is not handed out as carried"
	}
	if other := cl.CarriedElsewhere(ip); other != "" {
		return fmt.Sprintf("node %s carries it too", other)
	}
	return ""
}

// takeKept hands out the i-th kept address: back to its holder, or
// reclaimed for another.
func (c *Chooser) takeKept(i int, reclaimed bool) Taken {
	k := c.kept[i]
	c.kept = slices.Delete(c.kept, i, i+1)
	poolstatus.RemoveKept(c.pool, k.entry.IP)
	ip, _ := c.alloc.Range().IP(k.offset)
	return Taken{IP: ip, offset: k.offset, kept: &k.entry, reclaimed: reclaimed}
}

// OnInterfaces returns the addresses of carried (address to interface, as
// netstate.StaticCarriers maps them) that are on one of ifaces: a
// capture's candidates for adoption.
func OnInterfaces(carried map[netip.Addr]string, ifaces []string) []Carried {
	var out []Carried
	for ip, iface := range carried {
		if slices.Contains(ifaces, iface) {
			out = append(out, Carried{IP: ip, Interface: iface})
		}
	}
	return out
}

// CarriersOf maps every address the states show, static or learned, to
// the nodes whose state shows it.
func CarriersOf(states []nncev1beta1.NodeNetworkState) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, nns := range states {
		for ip := range netstate.Carriers(nns.Status.CurrentState.Raw) {
			out[ip] = append(out[ip], nns.Name)
		}
	}
	return out
}

// ElsewhereThan returns, for Asker.CarriedElsewhere, a node other than
// node that carriers (CarriersOf) shows carrying an address.
func ElsewhereThan(carriers map[netip.Addr][]string, node string) func(netip.Addr) string {
	return func(ip netip.Addr) string {
		for _, n := range carriers[ip] {
			if n != node {
				return n
			}
		}
		return ""
	}
}

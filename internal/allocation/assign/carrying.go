package assign

import (
	"net/netip"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// Carrying is what the nodes that ask for addresses carry, the one view
// every kind of holder adopts from: read once per pass, before the pool
// write, whose mutation reads nothing (lifecycle.ReadCarrying reads it
// from the API server).
type Carrying struct {
	// ByNode maps an asking node to the static addresses its
	// NodeNetworkState shows, and on which interface
	// (netstate.StaticCarriers); a node that published no state is
	// absent, and adopts nothing.
	ByNode map[string]map[netip.Addr]string
	// Carriers maps each address some node carries to the nodes that
	// carry it; nil when not known (no asking node carries an address of
	// the range, so it is not needed).
	Carriers map[netip.Addr][]string
	// Held maps an asking node to the addresses its records hold or
	// release: such a carried address is the node's already.
	Held map[string]map[netip.Addr]bool
}

// Hold notes the addresses a record of node holds or releases.
func (c *Carrying) Hold(node string, record ippoolv1.EnactmentIPPools) {
	for _, s := range record.Held() {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if c.Held == nil {
			c.Held = map[string]map[netip.Addr]bool{}
		}
		if c.Held[node] == nil {
			c.Held[node] = map[netip.Addr]bool{}
		}
		c.Held[node][ip] = true
	}
}

// Adopting completes cl with what its node carries on the interfaces
// ifaces returns for each capture (nil: the capture adopts nothing, as
// one that had an address before), what other nodes carry, and what the
// node's records hold (besides what cl.Holds says already).
func (c Carrying) Adopting(cl Asker, ifaces func(captureName string) []string) Asker {
	carried, ok := c.ByNode[cl.Node]
	if !ok {
		return cl
	}
	cl.Carried = func(captureName string) []Carried {
		return OnInterfaces(carried, ifaces(captureName))
	}
	held, holds := c.Held[cl.Node], cl.Holds
	cl.Holds = func(ip netip.Addr) bool { return held[ip] || (holds != nil && holds(ip)) }
	if c.Carriers != nil {
		cl.CarriedElsewhere = ElsewhereThan(c.Carriers, cl.Node)
	}
	return cl
}

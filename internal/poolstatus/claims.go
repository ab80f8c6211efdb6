package poolstatus

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Owner is one holder of an address: an enactment, and where in it the
// address is used.
type Owner struct {
	Enactment string `json:"enactment"`
	Node      string `json:"node,omitempty"`
	Policy    string `json:"policy,omitempty"`
	// Capture is the capture whose state holds the address; empty if none.
	Capture string `json:"capture,omitempty"`
	// Interface is the interface of the enactment's desired state that
	// carries the address; empty if none does.
	Interface string `json:"interface,omitempty"`
}

// String describes the owner for messages: "node n1 and interface eth1
// (enactment n1.p)".
func (o Owner) String() string {
	var b strings.Builder
	b.WriteString("node " + cmp.Or(o.Node, "?"))
	switch {
	case o.Interface != "":
		b.WriteString(" and interface " + o.Interface)
	case o.Capture != "":
		b.WriteString(" and capture " + o.Capture)
	}
	b.WriteString(" (enactment " + o.Enactment + ")")
	return b.String()
}

// Claims maps every address that enactments record from one pool to its
// owners, sorted by enactment.
type Claims map[netip.Addr][]Owner

// ClaimsOf collects the claims on pool from enactments. Unparseable
// addresses are ignored: no bit can stand for them.
func ClaimsOf(pool string, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) Claims {
	c := Claims{}
	for i := range enactments {
		e := &enactments[i]
		record := e.Status.IPPool[pool].Allocated
		if len(record) == 0 {
			continue
		}
		captures, interfaces := capturesByIP(e), interfacesByIP(e.Status.DesiredState.Raw)
		for _, s := range record {
			ip, err := netip.ParseAddr(s)
			if err != nil || slices.ContainsFunc(c[ip], func(o Owner) bool { return o.Enactment == e.Name }) {
				continue
			}
			c[ip] = append(c[ip], Owner{Enactment: e.Name, Node: e.Labels[shared.EnactmentNodeLabel],
				Policy: e.Labels[shared.EnactmentPolicyLabel], Capture: captures[ip], Interface: interfaces[ip]})
		}
	}
	for _, owners := range c {
		slices.SortFunc(owners, func(a, b Owner) int { return strings.Compare(a.Enactment, b.Enactment) })
	}
	return c
}

// Addrs returns the claimed addresses in order.
func (c Claims) Addrs() []netip.Addr {
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

// interfacesByIP maps the static addresses of a desired state to the
// interfaces that carry them.
func interfacesByIP(desired []byte) map[netip.Addr]string {
	var state struct {
		Interfaces []struct {
			Name string `json:"name"`
			IPv4 struct {
				Address []struct {
					IP string `json:"ip"`
				} `json:"address"`
			} `json:"ipv4"`
			IPv6 struct {
				Address []struct {
					IP string `json:"ip"`
				} `json:"address"`
			} `json:"ipv6"`
		} `json:"interfaces"`
	}
	out := map[netip.Addr]string{}
	if len(desired) == 0 || yaml.Unmarshal(desired, &state) != nil {
		return out
	}
	for _, iface := range state.Interfaces {
		for _, a := range append(iface.IPv4.Address, iface.IPv6.Address...) {
			if ip, err := netip.ParseAddr(a.IP); err == nil {
				if _, seen := out[ip]; !seen {
					out[ip] = iface.Name
				}
			}
		}
	}
	return out
}

// Audit compares a pool's bitmap with the claims on it.
type Audit struct {
	// Missing are claimed addresses the range hands out whose bit is not
	// set: the Indexed invariant is broken and the pool needs a rebuild.
	Missing []netip.Addr
	// Unclaimed are set offsets that no enactment claims: allocations in
	// flight, or leaks for garbage collection.
	Unclaimed []uint64
	// Outside are claimed addresses the range does not hand out (the pool
	// was re-created smaller, or with new excludes).
	Outside []netip.Addr
	// Collisions are addresses claimed by more than one owner.
	Collisions []netip.Addr
}

// Consistent reports whether the bitmap is exactly the claimed set and no
// address is claimed twice.
func (a Audit) Consistent() bool {
	return len(a.Missing) == 0 && len(a.Unclaimed) == 0 && len(a.Outside) == 0 && len(a.Collisions) == 0
}

// AuditPool compares alloc with claims. Every list is sorted.
func AuditPool(alloc *ippool.Allocator, claims Claims) Audit {
	var a Audit
	claimed := map[uint64]bool{}
	rng := alloc.Range()
	for _, ip := range claims.Addrs() {
		if len(claims[ip]) > 1 {
			a.Collisions = append(a.Collisions, ip)
		}
		off, err := rng.Assignable(ip)
		if err != nil {
			a.Outside = append(a.Outside, ip)
			continue
		}
		claimed[off] = true
		if !alloc.Has(off) {
			a.Missing = append(a.Missing, ip)
		}
	}
	for off := range alloc.Offsets() {
		if !claimed[off] {
			a.Unclaimed = append(a.Unclaimed, off)
		}
	}
	return a
}

// CollisionMessage describes the collisions for the IPCollision condition,
// in the specification's words, and says how to resolve them.
func CollisionMessage(pool string, claims Claims, collisions []netip.Addr) string {
	parts := make([]string, 0, len(collisions))
	for _, ip := range collisions {
		owners := claims[ip]
		others := make([]string, 0, len(owners)-1)
		for _, o := range owners[1:] {
			others = append(others, o.String())
		}
		parts = append(parts, fmt.Sprintf("The IP address %s at %s is colliding with %s", ip, owners[0], strings.Join(others, " and ")))
	}
	last := claims[collisions[len(collisions)-1]]
	return strings.Join(parts, "; ") + fmt.Sprintf("; reset all but one holder, e.g. kubectl annotate nnce %s %s=%s",
		last[len(last)-1].Enactment, ippoolv1.ResetIPPoolAnnotation, pool)
}

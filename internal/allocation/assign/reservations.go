package assign

// The reservations of a pool: parsed, matched to askers, described.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/labels"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Reservation is a valid reservation of a pool, parsed.
type Reservation struct {
	IP     netip.Addr
	Offset uint64
	Node   string
	// NodeSelector is the reservation's selector as written, Selector
	// parsed.
	NodeSelector *metav1.LabelSelector
	Selector     labels.Selector
	Policy       string
}

// Matches reports whether the reservation is for the asker. labels is
// evaluated only for a selector.
func (r Reservation) Matches(node, policy string, nodeLabels func() map[string]string) bool {
	if r.Policy != "" && r.Policy != policy {
		return false
	}
	if r.Node != "" {
		return r.Node == node
	}
	if nodeLabels == nil {
		return false
	}
	l := nodeLabels()
	return l != nil && r.Selector.Matches(labels.Set(l))
}

// Describe names whom the reservation is for, as messages write it.
func (r Reservation) Describe() string {
	who := "node " + r.Node
	if r.Node == "" {
		who = "the node matching " + metav1.FormatLabelSelector(r.NodeSelector)
	}
	if r.Policy != "" {
		who += " (policy " + r.Policy + ")"
	}
	return who
}

// Invalid is a reservation that can never be handed out, and why.
type Invalid struct {
	IP  string
	Why string
}

// Reservations parses the reservations of pool against its range. Those
// that can never be handed out (not an address, outside the range,
// excluded, the gateway, listed twice, a bad selector) are returned apart,
// with a reason an admin can act on; admission refuses them when the
// webhook runs, and the pool controller reports them otherwise.
func Reservations(pool *ippoolv1.NodeIPPool, rng *ippool.Range) ([]Reservation, []Invalid) {
	var (
		valid   []Reservation
		invalid []Invalid
		seen    = map[netip.Addr]bool{}
	)
	for _, res := range pool.Spec.Reservations {
		ip, err := ippool.ParseAddr(res.IP)
		if err != nil {
			invalid = append(invalid, Invalid{res.IP, err.Error()})
			continue
		}
		off, err := rng.Assignable(ip)
		switch {
		case ip == rng.Gateway():
			invalid = append(invalid, Invalid{res.IP, "it is the gateway, which is never handed out"})
			continue
		case errors.Is(err, ippool.ErrExcluded):
			invalid = append(invalid, Invalid{res.IP, fmt.Sprintf("it is excluded from the range %s-%s (spec.range.exclude, or a network, broadcast or anycast address)", rng.Start(), rng.End())})
			continue
		case err != nil:
			invalid = append(invalid, Invalid{res.IP, fmt.Sprintf("it is outside the range %s-%s", rng.Start(), rng.End())})
			continue
		case seen[ip]:
			invalid = append(invalid, Invalid{res.IP, "it is reserved more than once"})
			continue
		}
		seen[ip] = true
		r := Reservation{IP: ip, Offset: off, Node: res.Node, Policy: res.Policy}
		if res.Node == "" {
			sel, err := metav1.LabelSelectorAsSelector(res.NodeSelector)
			if err != nil || res.NodeSelector == nil {
				invalid = append(invalid, Invalid{res.IP, fmt.Sprintf("its node selector is invalid: %v", err)})
				continue
			}
			r.Selector, r.NodeSelector = sel, res.NodeSelector
		}
		valid = append(valid, r)
	}
	return valid, invalid
}

// Pinnable keeps of pinned (poolstatus.Audit.Pinned) the addresses an
// unrecognized IPAddress may keep from being handed out: none kept for a
// node's return or reserved for a node, which it must not take from them.
func Pinnable(p *ippoolv1.NodeIPPool, rng *ippool.Range, pinned []netip.Addr) []netip.Addr {
	if len(pinned) == 0 {
		return nil
	}
	reservations, _ := Reservations(p, rng)
	return slices.DeleteFunc(slices.Clone(pinned), func(ip netip.Addr) bool {
		return poolstatus.KeptOf(p, ip.String()) != nil ||
			slices.ContainsFunc(reservations, func(r Reservation) bool { return r.IP == ip })
	})
}

package pool

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// claims maps every address enactments record from one pool to the
// enactments that record it, sorted.
type claims map[netip.Addr][]string

// claimsOf collects the claims on pool from enactments. Unparseable
// addresses are ignored: no bit can stand for them.
func claimsOf(pool string, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) claims {
	c := claims{}
	for i := range enactments {
		e := &enactments[i]
		for _, s := range e.Status.IPPool[pool].Allocated {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if !slices.Contains(c[ip], e.Name) {
				c[ip] = append(c[ip], e.Name)
				slices.Sort(c[ip])
			}
		}
	}
	return c
}

// rebuildResult is what a rebuild found.
type rebuildResult struct {
	// set is the number of claimed bits the rebuild had to set.
	set int
	// outside lists claims the range no longer hands out ("ip by enactment").
	outside []string
	// collisions lists addresses claimed by more than one enactment.
	collisions []string
}

// rebuild sets in alloc the bit of every claim the range hands out, and
// reports claims outside the range and collisions. It never clears a bit.
func rebuild(alloc *ippool.Allocator, c claims) rebuildResult {
	var res rebuildResult
	for _, ip := range sortedAddrs(c) {
		owners := c[ip]
		if len(owners) > 1 {
			res.collisions = append(res.collisions, fmt.Sprintf("%s is held by %s", ip, strings.Join(owners, " and ")))
		}
		off, err := alloc.Range().Assignable(ip)
		if err != nil {
			res.outside = append(res.outside, fmt.Sprintf("%s by %s", ip, strings.Join(owners, ", ")))
			continue
		}
		if !alloc.Has(off) {
			_ = alloc.Allocate(off) // assignable and free
			res.set++
		}
	}
	return res
}

func sortedAddrs(c claims) []netip.Addr {
	out := make([]netip.Addr, 0, len(c))
	for ip := range c {
		out = append(out, ip)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// olderOverlapping returns the name of the oldest pool older than p whose
// range overlaps p's, or "". Age is creation time, then name.
func olderOverlapping(p *ippoolv1.NodeIPPool, rng *ippool.Range, pools []ippoolv1.NodeIPPool) string {
	for i := range pools {
		o := &pools[i]
		if o.UID == p.UID || !older(o, p) || !o.DeletionTimestamp.IsZero() {
			continue
		}
		orng, err := poolstatus.Range(o)
		if err == nil && orng.Overlaps(rng) {
			return o.Name
		}
	}
	return ""
}

func older(a, b *ippoolv1.NodeIPPool) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Package poolstatus translates between a NodeIPPool object and the pure
// allocator: the range of its spec and the bitmap and counts of its status.
// Every writer of a pool's status, and every reader of its bitmap, uses it,
// so that they agree on what it says.
package poolstatus

import (
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/api/meta"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Range builds the allocator range of a pool; errors wrap
// ippool.ErrInvalidRange.
func Range(pool *ippoolv1.NodeIPPool) (*ippool.Range, error) {
	r := pool.Spec.Range
	return ippool.NewRange(ippool.Spec{CIDR: r.CIDR, Start: r.Start, End: r.End, Exclude: r.Exclude, Gateway: pool.Spec.Gateway})
}

// Address is what a capture served by pool resolves to when it holds ip:
// the address with the prefix length of the range, and the pool's gateway
// and DNS settings. rng is the pool's range.
func Address(pool *ippoolv1.NodeIPPool, rng *ippool.Range, ip netip.Addr) capture.Address {
	a := capture.Address{IP: ip, PrefixLength: rng.Prefix().Bits(), Gateway: rng.Gateway()}
	if dns := pool.Spec.DNS; dns != nil {
		for _, s := range dns.Servers {
			if server, err := netip.ParseAddr(s); err == nil {
				a.DNSServers = append(a.DNSServers, server)
			}
		}
		a.DNSSearch = slices.Clone(dns.Search)
	}
	return a
}

// Outside says why the range rng of the pool named pool no longer hands
// out ip, the address a holder records for its capture captureName, or ""
// when it still does. Every kind of holder replaces such an address
// (ippoolv1.ReasonAddressOutsideRange) in these words: an enactment its
// handler or the pool controller serves, and a pooled policy's node.
func Outside(pool string, rng *ippool.Range, captureName string, ip netip.Addr) string {
	if _, err := rng.Assignable(ip); err == nil {
		return ""
	}
	return fmt.Sprintf("capture %s: %s is no longer handed out by NodeIPPool %q (%s)", captureName, ip, pool, rng)
}

// Allocator returns the allocator of a pool with its status bitmap
// restored. Errors wrap ippool.ErrInvalidRange, ippool.ErrInvalidSnapshot or
// ippool.ErrSnapshotMismatch.
func Allocator(pool *ippoolv1.NodeIPPool) (*ippool.Allocator, error) {
	rng, err := Range(pool)
	if err != nil {
		return nil, err
	}
	alloc := ippool.NewAllocator(rng)
	if err := alloc.Restore(pool.Status.AllocatedOffsets); err != nil {
		return nil, err
	}
	return alloc, nil
}

// AddrStrings sorts ips and returns them as strings.
func AddrStrings(ips []netip.Addr) []string {
	slices.SortFunc(ips, netip.Addr.Compare)
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// Set writes the allocator's snapshot and counts into the pool's status,
// leaving its conditions, entries and stamp alone. Counts saturate at
// 2^63-1.
func Set(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) {
	pool.Status.AllocatedOffsets = alloc.Snapshot()
	SetCounts(pool, alloc)
}

// SetCounts writes the allocator's counts, and the range's start and end
// (defaults included), into the pool's status.
func SetCounts(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) {
	pool.Status.Start, pool.Status.End = alloc.Range().Start().String(), alloc.Range().End().String()
	pool.Status.Size = saturate(alloc.Range().Size())
	pool.Status.Allocated = saturate(alloc.Count())
	pool.Status.Free = saturate(alloc.Free())
}

func saturate(n uint64) int64 {
	if n > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(n)
}

// ExhaustedMessage is the message of an enactment that could not get want
// more addresses from a full pool of size addresses.
func ExhaustedMessage(pool string, size uint64, want int) string {
	return fmt.Sprintf("NodeIPPool %q is exhausted: all %d addresses are allocated and %d more are needed; grow its range in place "+
		"(an earlier spec.range.start, a later end, or fewer excludes, within its CIDR; 'kubectl nodeippool plan -f' shows the change), or free addresses; if the range already fills its CIDR, create a pool over a larger CIDR and point the policies at it",
		pool, size, want)
}

// Rebuilding reports whether the pool controller has not looked at a pool
// yet (a pool just created: no Available condition) or is rebuilding it
// (Available Unknown / ReconcilingPool: new, reset, or after a restart):
// unservable only until the rebuild is done, after which the controller
// serves what waits for the pool.
func Rebuilding(pool *ippoolv1.NodeIPPool) bool {
	if !pool.DeletionTimestamp.IsZero() {
		return false
	}
	c := meta.FindStatusCondition(pool.Status.Conditions, ippoolv1.ConditionAvailable)
	return c == nil || c.Status == metav1.ConditionUnknown && c.Reason == ippoolv1.ReasonReconcilingPool
}

// Unservable says why a pool hands out no address now, or "". Only the
// pool controller marks a pool Available; an exhausted pool still serves
// whatever frees.
func Unservable(pool *ippoolv1.NodeIPPool) string {
	if !pool.DeletionTimestamp.IsZero() {
		return fmt.Sprintf("NodeIPPool %q is being deleted and hands out nothing; create it again, or use another pool", pool.Name)
	}
	c := meta.FindStatusCondition(pool.Status.Conditions, ippoolv1.ConditionAvailable)
	switch {
	case c == nil:
		return fmt.Sprintf("NodeIPPool %q has not been reconciled by the pool controller yet; waiting for it", pool.Name)
	case c.Status == metav1.ConditionTrue, c.Reason == ippoolv1.ReasonExhaustedIPPool:
		return ""
	}
	return fmt.Sprintf("NodeIPPool %q is not available (%s: %s); waiting for it", pool.Name, c.Reason, c.Message)
}

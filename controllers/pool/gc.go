package pool

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// sightings remembers since when this process has seen each of a set of
// things it may have to act on once they are old enough: the set bits
// nobody claims, the in-flight entries. It is the controller's one clock
// for such ages, whoever wrote the thing. It is memory only: a restarted
// controller starts its clocks again, which only delays what it does.
type sightings[K comparable] struct {
	since map[K]time.Time
}

// see records the keys present now, forgets every other key, and returns
// the age of each present key.
func (s *sightings[K]) see(keys []K, now time.Time) map[K]time.Duration {
	seen := make(map[K]time.Time, len(keys))
	ages := make(map[K]time.Duration, len(keys))
	for _, k := range keys {
		since, ok := s.since[k]
		if !ok {
			since = now
		}
		seen[k] = since
		ages[k] = now.Sub(since)
	}
	s.since = seen
	return ages
}

// forget drops keys that were dealt with.
func (s *sightings[K]) forget(keys ...K) {
	for _, k := range keys {
		delete(s.since, k)
	}
}

// dueOffsets returns, sorted, the offsets whose age reached grace, and how
// long until the next one does (0 if none is pending).
func dueOffsets(ages map[uint64]time.Duration, grace time.Duration) (due []uint64, next time.Duration) {
	for off, age := range ages {
		if age >= grace {
			due = append(due, off)
		} else if wait := grace - age; next == 0 || wait < next {
			next = wait
		}
	}
	slices.Sort(due)
	return due, next
}

// withoutEntries drops from unclaimed the offsets of in-flight and
// quarantined addresses: their entries, not garbage collection, decide when
// they are freed.
func withoutEntries(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, unclaimed []uint64) []uint64 {
	if len(pool.Status.InFlight) == 0 && len(pool.Status.Quarantined) == 0 {
		return unclaimed
	}
	out := make([]uint64, 0, len(unclaimed))
	for _, off := range unclaimed {
		ip, err := alloc.Range().IP(off)
		if err == nil && (poolstatus.InFlightOf(pool, ip.String()) != nil || poolstatus.QuarantineOf(pool, ip.String()) != nil) {
			continue
		}
		out = append(out, off)
	}
	return out
}

// collected is what garbage collection did to one pool write.
type collected struct {
	// freed are the offsets it freed.
	freed []uint64
	// quarantined describes the addresses it quarantined instead, because
	// a node's network carries them: "10.0.0.4 on node node03".
	quarantined []string
}

// collectUnclaimed releases the offsets of due that are set, unclaimed and
// held by no in-flight or quarantine entry, unless a node's network
// carries the address (carried, from the NodeNetworkStates, read after the
// enactments claims come from): such an address is quarantined for that
// node instead, and freed once it shows the address gone.
func collectUnclaimed(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, owners poolstatus.Owners, due []uint64,
	carried map[netip.Addr]string, now metav1.Time) collected {
	var c collected
	for _, off := range due {
		ip, err := alloc.Range().IP(off)
		if err != nil || !alloc.Has(off) || len(owners.Recognized(ip)) > 0 ||
			poolstatus.InFlightOf(pool, ip.String()) != nil || poolstatus.QuarantineOf(pool, ip.String()) != nil {
			continue
		}
		node, isCarried := carried[ip]
		if !isCarried && len(owners[ip]) > 0 {
			continue // an unrecognized IPAddress keeps it from being handed out
		}
		if isCarried {
			poolstatus.AddQuarantine(pool, ippoolv1.QuarantinedAddress{IP: ip.String(), Node: node, Since: now})
			c.quarantined = append(c.quarantined, fmt.Sprintf("%s on node %s", ip, node))
			continue
		}
		_ = alloc.Release(off) // set, so releasable
		c.freed = append(c.freed, off)
	}
	return c
}

func offsetsToIPs(pool *ippoolv1.NodeIPPool, offsets []uint64) []string {
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(offsets))
	for _, off := range offsets {
		ip, err := rng.IP(off)
		if err != nil {
			out = append(out, fmt.Sprintf("offset %d", off))
			continue
		}
		out = append(out, ip.String())
	}
	return out
}

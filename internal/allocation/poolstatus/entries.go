package poolstatus

import (
	"slices"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// The entry lists of a pool's status (in flight, quarantined, kept) are
// keyed by address; entryOf and without work on any of them, given how to
// read an entry's address.
func inFlightIP(e *ippoolv1.InFlightAddress) string       { return e.IP }
func quarantinedIP(q *ippoolv1.QuarantinedAddress) string { return q.IP }
func keptIP(k *ippoolv1.KeptAddress) string               { return k.IP }

// entryOf returns the entry of ip in list, or nil.
func entryOf[T any](list []T, ipOf func(*T) string, ip string) *T {
	for i := range list {
		if ipOf(&list[i]) == ip {
			return &list[i]
		}
	}
	return nil
}

// without returns list without the entries of ip; nil when none is left.
func without[T any](list []T, ipOf func(*T) string, ip string) []T {
	list = slices.DeleteFunc(list, func(e T) bool { return ipOf(&e) == ip })
	if len(list) == 0 {
		return nil
	}
	return list
}

// InFlightOf returns the in-flight entry of ip, or nil.
func InFlightOf(pool *ippoolv1.NodeIPPool, ip string) *ippoolv1.InFlightAddress {
	return entryOf(pool.Status.InFlight, inFlightIP, ip)
}

// QuarantineOf returns the quarantine entry of ip, or nil.
func QuarantineOf(pool *ippoolv1.NodeIPPool, ip string) *ippoolv1.QuarantinedAddress {
	return entryOf(pool.Status.Quarantined, quarantinedIP, ip)
}

// AddInFlight records that e was taken; an older entry for the same
// address is replaced.
func AddInFlight(pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) {
	RemoveInFlight(pool, e.IP)
	pool.Status.InFlight = append(pool.Status.InFlight, e)
}

// RemoveInFlight removes the in-flight entry of ip, if any.
func RemoveInFlight(pool *ippoolv1.NodeIPPool, ip string) {
	pool.Status.InFlight = without(pool.Status.InFlight, inFlightIP, ip)
}

// Unrecorded removes the in-flight entry of ip, which will not be recorded,
// and reports whether its bit may be cleared: an address that was being
// handed back from quarantine goes back to its quarantine instead, since
// its holder may still carry it; one taken from the addresses kept for a
// holder's return is kept for it again (and its bit cleared: a kept
// address is free).
func Unrecorded(pool *ippoolv1.NodeIPPool, ip string) bool {
	e := InFlightOf(pool, ip)
	if e == nil {
		return false
	}
	returning, kept := e.Returning, e.Kept
	RemoveInFlight(pool, ip)
	// An origin of another address is none: only where this address
	// came from goes back.
	if returning != nil && returning.IP != ip {
		returning = nil
	}
	if kept != nil && kept.IP != ip {
		kept = nil
	}
	if returning != nil {
		AddQuarantine(pool, *returning)
		return false
	}
	if kept != nil {
		AddKept(pool, *kept)
	}
	return true
}

// AddQuarantine quarantines q.IP unless it is already quarantined, and
// reports whether it added an entry.
func AddQuarantine(pool *ippoolv1.NodeIPPool, q ippoolv1.QuarantinedAddress) bool {
	if QuarantineOf(pool, q.IP) != nil {
		return false
	}
	pool.Status.Quarantined = append(pool.Status.Quarantined, q)
	return true
}

// RemoveQuarantine lifts the quarantine of ip, if any.
func RemoveQuarantine(pool *ippoolv1.NodeIPPool, ip string) {
	pool.Status.Quarantined = without(pool.Status.Quarantined, quarantinedIP, ip)
}

// maxKept is how many kept addresses a pool lists at most, as the CRD
// allows: beyond it, the longest kept is dropped, which only forgets a
// preference.
const maxKept = 4096

// KeptOf returns the kept entry of ip, or nil.
func KeptOf(pool *ippoolv1.NodeIPPool, ip string) *ippoolv1.KeptAddress {
	return entryOf(pool.Status.KeptForReturn, keptIP, ip)
}

// AddKept keeps k.IP for its holder's return, replacing an older entry of
// the same address; the list stays sorted, longest kept first.
func AddKept(pool *ippoolv1.NodeIPPool, k ippoolv1.KeptAddress) {
	RemoveKept(pool, k.IP)
	i, _ := slices.BinarySearchFunc(pool.Status.KeptForReturn, k, func(a, b ippoolv1.KeptAddress) int {
		return a.Since.Compare(b.Since.Time)
	})
	pool.Status.KeptForReturn = slices.Insert(pool.Status.KeptForReturn, i, k)
	if n := len(pool.Status.KeptForReturn); n > maxKept {
		pool.Status.KeptForReturn = slices.Delete(pool.Status.KeptForReturn, 0, n-maxKept)
	}
}

// RemoveKept forgets the kept entry of ip, if any.
func RemoveKept(pool *ippoolv1.NodeIPPool, ip string) {
	pool.Status.KeptForReturn = without(pool.Status.KeptForReturn, keptIP, ip)
}

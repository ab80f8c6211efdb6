package poolstatus

import (
	"slices"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// InFlightOf returns the in-flight entry of ip, or nil.
func InFlightOf(pool *ippoolv1.NodeIPPool, ip string) *ippoolv1.InFlightAddress {
	i := slices.IndexFunc(pool.Status.InFlight, func(e ippoolv1.InFlightAddress) bool { return e.IP == ip })
	if i < 0 {
		return nil
	}
	return &pool.Status.InFlight[i]
}

// QuarantineOf returns the quarantine entry of ip, or nil.
func QuarantineOf(pool *ippoolv1.NodeIPPool, ip string) *ippoolv1.QuarantinedAddress {
	i := slices.IndexFunc(pool.Status.Quarantined, func(q ippoolv1.QuarantinedAddress) bool { return q.IP == ip })
	if i < 0 {
		return nil
	}
	return &pool.Status.Quarantined[i]
}

// AddInFlight records that e was taken; an older entry for the same
// address is replaced.
func AddInFlight(pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) {
	RemoveInFlight(pool, e.IP)
	pool.Status.InFlight = append(pool.Status.InFlight, e)
}

// RemoveInFlight removes the in-flight entry of ip, if any.
func RemoveInFlight(pool *ippoolv1.NodeIPPool, ip string) {
	pool.Status.InFlight = slices.DeleteFunc(pool.Status.InFlight, func(e ippoolv1.InFlightAddress) bool { return e.IP == ip })
	if len(pool.Status.InFlight) == 0 {
		pool.Status.InFlight = nil
	}
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
	pool.Status.Quarantined = slices.DeleteFunc(pool.Status.Quarantined, func(q ippoolv1.QuarantinedAddress) bool { return q.IP == ip })
	if len(pool.Status.Quarantined) == 0 {
		pool.Status.Quarantined = nil
	}
}

// maxKept is how many kept addresses a pool lists at most, as the CRD
// allows: beyond it, the longest kept is dropped, which only forgets a
// preference.
const maxKept = 4096

// KeptOf returns the kept entry of ip, or nil.
func KeptOf(pool *ippoolv1.NodeIPPool, ip string) *ippoolv1.KeptAddress {
	i := slices.IndexFunc(pool.Status.KeptForReturn, func(k ippoolv1.KeptAddress) bool { return k.IP == ip })
	if i < 0 {
		return nil
	}
	return &pool.Status.KeptForReturn[i]
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
	pool.Status.KeptForReturn = slices.DeleteFunc(pool.Status.KeptForReturn, func(k ippoolv1.KeptAddress) bool { return k.IP == ip })
	if len(pool.Status.KeptForReturn) == 0 {
		pool.Status.KeptForReturn = nil
	}
}

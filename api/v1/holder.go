package v1

import "cmp"

// A holder is what an address of a pool is held for, named in the holder
// field of the pool's entries:
//
//   - a NodeNetworkConfigurationEnactment (handler mode), by its name,
//     "<node>.<policy>";
//   - a node of a PooledNodeNetworkConfigurationPolicy (companion mode),
//     "PooledNodeNetworkConfigurationPolicy/<policy>/<node>";
//   - a Cluster API IPAddressClaim, "IPAddressClaim/<namespace>/<name>".
//
// Pools written before the holder field name it in the deprecated
// enactment field, which is read when holder is empty and written
// alongside it (MirrorHolders).

// HolderName is the holder the entry names: Holder, or on an entry
// written before holder existed, DeprecatedEnactment.
func (e InFlightAddress) HolderName() string { return cmp.Or(e.Holder, e.DeprecatedEnactment) }

// HolderName is the holder the entry names: Holder, or on an entry
// written before holder existed, DeprecatedEnactment.
func (q QuarantinedAddress) HolderName() string { return cmp.Or(q.Holder, q.DeprecatedEnactment) }

// HolderName is the holder the entry names: Holder, or on an entry
// written before holder existed, DeprecatedEnactment.
func (k KeptAddress) HolderName() string { return cmp.Or(k.Holder, k.DeprecatedEnactment) }

// MirrorHolders names every entry's holder in both fields, holder and the
// deprecated enactment, as every write of a pool's status does: earlier
// versions read enactment only, and the CRD requires the two to agree.
func (s *NodeIPPoolStatus) MirrorHolders() {
	for i := range s.InFlight {
		e := &s.InFlight[i]
		e.Holder = e.HolderName()
		e.DeprecatedEnactment = e.Holder
		if e.Returning != nil {
			e.Returning.mirror()
		}
		if e.Kept != nil {
			e.Kept.mirror()
		}
	}
	for i := range s.Quarantined {
		s.Quarantined[i].mirror()
	}
	for i := range s.KeptForReturn {
		s.KeptForReturn[i].mirror()
	}
}

func (q *QuarantinedAddress) mirror() {
	q.Holder = q.HolderName()
	q.DeprecatedEnactment = q.Holder
}

func (k *KeptAddress) mirror() {
	k.Holder = k.HolderName()
	k.DeprecatedEnactment = k.Holder
}

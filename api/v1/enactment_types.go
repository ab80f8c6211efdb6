package v1

// EnactmentIPPools is the record an enactment (NNCE) keeps in status.ippool
// of the addresses its node holds, by pool name:
//
//	ippool:
//	  traffic-1:
//	    allocated: [10.10.10.8]
//
// Together with status.capturedStates it is the durable source of truth of
// who holds which address; a NodeIPPool's status can be rebuilt from it.
type EnactmentIPPools map[string]PoolAllocation

// Held returns every address the record claims, in any pool: allocated
// and releasing.
func (r EnactmentIPPools) Held() []string {
	var out []string
	for _, a := range r {
		out = append(out, a.Held()...)
	}
	return out
}

// PoolAllocation lists the addresses one enactment holds from one pool.
type PoolAllocation struct {
	// Allocated are the addresses, in the order their captures were resolved.
	// +listType=set
	Allocated []string `json:"allocated"`
	// Releasing are addresses the enactment no longer uses (a capture the
	// policy dropped, an address the range no longer hands out): it asks
	// the pool controller to take them back. They stay claimed, handed to
	// nobody, until the controller has quarantined them and removed them
	// from here; the node's handler takes them off its interfaces once
	// they are quarantined.
	// +optional
	// +listType=set
	Releasing []string `json:"releasing,omitempty"`
	// NotAdopted tells of the addresses the node carried, on the
	// interfaces the policy puts its captures on, when this pool first
	// served them, that the pool could not give it (excluded, outside the
	// range, held, reserved or carried by another node), and why: the
	// pool's addresses replaced them. An address the node carried and the
	// pool could give it is adopted instead, and the node keeps it.
	// +optional
	NotAdopted []string `json:"notAdopted,omitempty"`
}

// Held returns every address the allocation claims: the allocated ones,
// then the releasing ones.
func (a PoolAllocation) Held() []string {
	if len(a.Releasing) == 0 {
		return a.Allocated
	}
	return append(append(make([]string, 0, len(a.Allocated)+len(a.Releasing)), a.Allocated...), a.Releasing...)
}

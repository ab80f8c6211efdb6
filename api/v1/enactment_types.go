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

// PoolAllocation lists the addresses one enactment holds from one pool.
type PoolAllocation struct {
	// Allocated are the addresses, in the order their captures were resolved.
	// +listType=set
	Allocated []string `json:"allocated"`
}

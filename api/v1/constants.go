package v1

// The annotation that asks for a repair, as described in the specification's
// "Manual garbage collection".
const (
	// ResetIPPoolAnnotation asks the pool controller to repair allocations.
	// On a NodeIPPool (any value) it rebuilds the pool's bitmap from the
	// enactments. On a NodeNetworkConfigurationPolicy or an enactment its value
	// names a pool, and that scope's allocations from the pool are dropped so
	// the handlers allocate again. The controller removes it when done.
	ResetIPPoolAnnotation = "nmstate.io/reset-ippool"
)

// ConditionAvailable is the one condition type of a NodeIPPool. It is True
// only when the pool controller has rebuilt the pool and handlers may
// allocate from it.
const ConditionAvailable = "Available"

// Reasons of the Available condition. The spellings are the specification's,
// including "Unsyncronized".
const (
	// ReasonReconcilingPool (Unknown): the pool is being rebuilt; handlers do
	// not allocate until it is done.
	ReasonReconcilingPool = "ReconcilingPool"
	// ReasonReconciledPool (True): the pool is up to date.
	ReasonReconciledPool = "ReconciledPool"
	// ReasonExhaustedIPPool (False): a request could not be served because
	// every address is taken; re-create the pool with a larger range.
	ReasonExhaustedIPPool = "ExhaustedIPPool"
	// ReasonUnsyncronizedIPPool (False): a rebuild failed and the pool may not
	// match the enactments.
	ReasonUnsyncronizedIPPool = "UnsyncronizedIPPool"
	// ReasonOverlappingIPPool (False): the pool's range overlaps an older
	// pool's; the newer pool is refused.
	ReasonOverlappingIPPool = "OverlappingIPPool"
	// ReasonIPCollision (False): two owners claim the same address.
	ReasonIPCollision = "IPCollision"
	// ReasonInvalidIPPool (False): the range passed admission but cannot be
	// used (for example a start that defaults past the end). Not in the
	// specification's table; added so that no bad spec fails silently.
	ReasonInvalidIPPool = "InvalidIPPool"
)

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

// ConditionAvailable is the main condition type of a NodeIPPool. It is True
// only when the pool controller has rebuilt the pool and handlers may
// allocate from it.
const ConditionAvailable = "Available"

// ConditionReservationsHonored is the condition type of a NodeIPPool that
// says whether every reservation (spec.reservations) is held by its node or
// free for it. It is False when another holder has a reserved address, or
// a reservation can never be handed out; the message names the address, the
// holder and what to do. It does not stop the pool from serving.
const ConditionReservationsHonored = "ReservationsHonored"

// Reasons of the ReservationsHonored condition.
const (
	// ReasonReservationsHonored (True): every reserved address is held by
	// its node or free for it (or the pool has no reservations).
	ReasonReservationsHonored = "ReservationsHonored"
	// ReasonReservationConflict (False): a reserved address is held by a
	// node the reservation does not name or select, or is free and carried
	// by such a node's network (no holder records it; it goes to no one
	// until that node no longer shows it). Nothing is taken from anyone:
	// reset the holder's enactment to move it, or take the address off the
	// node that carries it.
	ReasonReservationConflict = "ReservationConflict"
	// ReasonReservationNotHeld (False): a node holds another address of
	// the pool while the one reserved for it is free. Nodes keep what they
	// hold: reset the node's enactment to move it.
	ReasonReservationNotHeld = "ReservationNotHeld"
	// ReasonReservationInvalid (False): a reservation can never be handed
	// out (outside the range); fix or remove it.
	ReasonReservationInvalid = "ReservationInvalid"
)

// ConditionReleasesConfirmed is the condition type of a NodeIPPool that
// says whether every quarantined address is on its way out: True while
// each was released less than the quarantine period ago or its holder has
// shown it gone; False when one is still carried by its former holder
// past the quarantine period (ReasonAddressStillCarried), or the holder
// has published no network state since the release
// (ReasonReleaseUnconfirmed). The message names the node, the interface,
// the address and what to do. The addresses stay quarantined: a timer
// never hands an address to a second NIC. It does not stop the pool from
// serving.
const ConditionReleasesConfirmed = "ReleasesConfirmed"

// Reasons of the ReleasesConfirmed condition.
const (
	// ReasonReleasesConfirmed (True): no quarantine is overdue.
	ReasonReleasesConfirmed = "ReleasesConfirmed"
	// ReasonAddressStillCarried (False): a former holder's network still
	// shows an address released longer than the quarantine period ago.
	ReasonAddressStillCarried = "AddressStillCarried"
	// ReasonReleaseUnconfirmed (False): a former holder published no
	// network state since an address was released longer than the
	// quarantine period ago (its handler is down, or cannot read its
	// network).
	ReasonReleaseUnconfirmed = "ReleaseUnconfirmed"
)

// ConditionIPAddressesRecognized is the condition type of a NodeIPPool that
// says whether every Cluster API IPAddress naming it was made by this
// provider for its claim: False (ReasonUnrecognizedIPAddress) names each
// that was not, and its address. Such an IPAddress holds no address as a
// claim's record does: it never collides with a holder, never keeps a
// quarantine, a reservation or a range change from going, and never stops
// the pool from serving; it only keeps the address it names from being
// handed out until it is deleted, or adopted by the claim it names (an
// IPAddress restored from a backup). It is set once a pool has had one.
const ConditionIPAddressesRecognized = "IPAddressesRecognized"

// Reasons of the IPAddressesRecognized condition.
const (
	// ReasonIPAddressesRecognized (True): every IPAddress naming the pool
	// is a claim's record.
	ReasonIPAddressesRecognized = "IPAddressesRecognized"
	// ReasonUnrecognizedIPAddress (False): an IPAddress names the pool
	// that this provider did not make for its claim.
	ReasonUnrecognizedIPAddress = "UnrecognizedIPAddress"
)

// Reasons of the Available condition. The spellings are the specification's,
// including "Unsyncronized".
const (
	// ReasonReconcilingPool (Unknown): the pool is being rebuilt; handlers do
	// not allocate until it is done.
	ReasonReconcilingPool = "ReconcilingPool"
	// ReasonReconciledPool (True): the pool is up to date.
	ReasonReconciledPool = "ReconciledPool"
	// ReasonExhaustedIPPool (False): a request could not be served because
	// every address is taken; grow the range in place (start, end,
	// exclude), free addresses, or, when the range fills its CIDR, create a
	// pool over a larger CIDR.
	ReasonExhaustedIPPool = "ExhaustedIPPool"
	// ReasonReconcileFailed is kubernetes-nmstate's reason of the Warning
	// Event on a policy whose enactment gave up (its retries spent) or
	// whose rollout was aborted on it.
	ReasonReconcileFailed = "ReconcileFailed"
	// ReasonUnsyncronizedIPPool (False): a rebuild failed and the pool may not
	// match the enactments.
	ReasonUnsyncronizedIPPool = "UnsyncronizedIPPool"
	// ReasonOverlappingIPPool (False): the pool's range overlaps an older
	// pool's; the newer pool is refused.
	ReasonOverlappingIPPool = "OverlappingIPPool"
	// ReasonIPCollision (False): two owners claim the same address.
	ReasonIPCollision = "IPCollision"
	// ReasonTerminatingIPPool (False): the pool is being deleted; it hands
	// out nothing, and goes once nothing is in flight or quarantined.
	ReasonTerminatingIPPool = "TerminatingIPPool"
	// ReasonInvalidIPPool (False): the range passed admission but cannot be
	// used (for example a start that defaults past the end). Not in the
	// specification's table; added so that no bad spec fails silently.
	ReasonInvalidIPPool = "InvalidIPPool"
)

// FinalizerIPPool is set on an enactment that holds addresses. It keeps the
// enactment, the durable record of those addresses, until the pool
// controller has quarantined them in their pools (retire.Retire), whether
// the enactment's handler deleted it or its node is gone.
const FinalizerIPPool = "nmstate.io/ippool"

// FinalizerPoolEntries is set on every NodeIPPool by the pool controller.
// A deleted pool stays, handing out nothing, until no address is in
// flight (each is recorded or revoked) and no quarantine is left (each
// lifted on evidence): a late record of an address taken from the old
// incarnation can never meet a new pool of the same name that handed it
// out again, and a released address never leaves every pool's protection
// while its former holder may carry it.
const FinalizerPoolEntries = "nmstate.io/ippool-entries"

// Reasons of enactment conditions added by IP pools, next to
// kubernetes-nmstate's own.
const (
	// ReasonInvalidCapture (Failing): an ippool capture expression is
	// malformed.
	ReasonInvalidCapture = "InvalidCapture"
	// ReasonIPPoolNotFound (Failing): a capture names a pool that does not
	// exist.
	ReasonIPPoolNotFound = "IPPoolNotFound"
	// ReasonIPPoolExhausted (Failing): the pool has no free address for this
	// node. The pool's own ExhaustedIPPool condition is written by the pool
	// controller only.
	ReasonIPPoolExhausted = "IPPoolExhausted"
	// ReasonIPPoolInvalid (Failing): the pool's range cannot hand out
	// addresses.
	ReasonIPPoolInvalid = "IPPoolInvalid"
	// ReasonIPPoolNotAvailable (Pending): the pool is not Available=True
	// (being rebuilt, overlapping, ...); nothing is allocated until it is.
	ReasonIPPoolNotAvailable = "IPPoolNotAvailable"
	// ReasonIPPoolBusy (Pending): the enactment waits for the pool
	// controller, which allocates for it together with every other one that
	// waits, in one pool write (with --self-allocate: the handler's own pool
	// writes kept conflicting).
	ReasonIPPoolBusy = "IPPoolBusy"
	// ReasonNodeStateUnknown (pooled policy, Degraded): a node the policy
	// selects has published no NodeNetworkState yet (its handler has just
	// started or does not run, a restore brought its Node back without its
	// state, its machine is down): what it carries is not known, so it is
	// not given an address until its state is published.
	ReasonNodeStateUnknown = "NodeStateUnknown"
	// ReasonNodeStateRenewed (Event, pooled policy): the NodeNetworkState
	// of a node the policy waits on existed without a state for half a
	// minute and was deleted, for the node's handler to create it again
	// with its state (kubernetes-nmstate's handler never writes the state
	// again, until the node's network changes, once its first state write
	// after the create failed).
	ReasonNodeStateRenewed = "NodeStateRenewed"

	// ReasonAddressOutsideRange (Event): an enactment records an address its
	// pool no longer hands out (the pool was re-created smaller or with new
	// excludes); its handler allocates a new one.
	ReasonAddressOutsideRange = "AddressOutsideRange"
)

// Reasons of Events the controllers raise, besides the condition reasons.
const (
	// ReasonGarbageCollected (pool): bits that no enactment claimed for
	// longer than the grace period were freed.
	ReasonGarbageCollected = "GarbageCollected"
	// ReasonAddressesDropped (enactment): a reset annotation dropped the
	// enactment's addresses from a pool; its handler allocates again.
	ReasonAddressesDropped = "AddressesDropped"
	// ReasonIndexRepaired (pool): the bitmap lacked addresses that
	// enactments record (someone cleared it); the pool was rebuilt.
	ReasonIndexRepaired = "IndexRepaired"
	// ReasonEnactmentRetired (pool, enactment): the pool controller retired an
	// enactment whose node or policy is gone and released its addresses.
	ReasonEnactmentRetired = "EnactmentRetired"
	// ReasonInvalidReset (enactment, policy): a reset annotation names no
	// pool; it was removed without effect.
	ReasonInvalidReset = "InvalidReset"
	// ReasonUnvouchedStatus (pool): the status does not match its stamp (a
	// hand edit, or a status from another pool); handlers stopped
	// allocating and the pool was rebuilt from the holders' records.
	ReasonUnvouchedStatus = "UnvouchedStatus"
	// ReasonAllocationRevoked (pool, enactment): an address taken for an
	// enactment was not recorded within the grace period; the controller
	// fenced the enactment and freed the address. The handler allocates
	// again if it still needs one.
	ReasonAllocationRevoked = "AllocationRevoked"
	// ReasonQuarantineLifted (pool): quarantined addresses were freed
	// because their former holder showed them gone, or its Node is gone.
	ReasonQuarantineLifted = "QuarantineLifted"
	// ReasonAddressQuarantined (pool): a rebuild found addresses of the
	// range on a node's network that no holder records (the quarantine
	// of a deleted pool, a record lost by hand) and quarantined them.
	// (enactment, about its pool): the pool controller quarantined the
	// addresses the enactment asked to release (status.ippool releasing).
	ReasonAddressQuarantined = "AddressQuarantined"
	// ReasonNotServed (enactment, Warning): it has waited
	// Pending/IPPoolBusy for the pool controller for longer than the
	// handler's --unserved-warning; the controller may not run.
	ReasonNotServed = "NotServed"
	// ReasonRangeChanged (pool): the range's start, end or exclude changed
	// in place; the pool was rebuilt from the holders' records, its addresses at
	// their new offsets.
	ReasonRangeChanged = "RangeChanged"
	// ReasonAddressReturned (enactment): an address quarantined or kept
	// when the enactment's record was removed (its node left, its policy
	// stopped matching) was handed back to the same enactment and capture within
	// the quarantine period, as to a node replaced under the same name.
	ReasonAddressReturned = "AddressReturned"
	// ReasonAddressReclaimed (enactment): the pool had no free address but
	// those kept for deleted nodes' return (status.keptForReturn), and gave
	// the enactment the one kept longest; that node no longer gets it back.
	ReasonAddressReclaimed = "AddressReclaimed"
	// ReasonAddressAdopted (enactment, Normal): a capture's first address
	// is one its node already carried on the interface the policy's
	// template puts it on (a per-node policy's static address, say): the
	// pool gave it that address, so the node's network does not change.
	ReasonAddressAdopted = "AddressAdopted"
	// ReasonAddressNotAdopted (enactment, Warning): the node carries an
	// address on that interface that the pool cannot give it (excluded,
	// outside the range, reserved, held or carried by another node); the
	// capture gets another address, which replaces it at the next apply.
	ReasonAddressNotAdopted = "AddressNotAdopted"
	// ReasonAddressReleased (pool): a node's handler took a released
	// address off the interface it was applied to.
	ReasonAddressReleased = "AddressReleased"
	// ReasonReleaseFailed (pool): a node's handler could not take a
	// released address off its interface; it stays quarantined and the
	// handler tries again.
	ReasonReleaseFailed = "ReleaseFailed"
	// ReasonAddressesReleased (pooled policy, Normal): the addresses of a
	// node the policy no longer selects (or of every node, once it is
	// deleted) are quarantined and its generated policy takes them off its
	// interfaces.
	ReasonAddressesReleased = "AddressesReleased"
	// ReasonNodeDeletionWaits (Node, Normal): a deleted Node stays until
	// kubernetes-nmstate's handler on its machine has taken the addresses
	// of pooled policies off; the message says which, and the way out for
	// a machine that is shut down for good.
	ReasonNodeDeletionWaits = "NodeDeletionWaits"
	// ReasonNodeNotReady (pooled policy): the release of a node's addresses
	// waits for its Node, which is not Ready, to apply the policy that
	// takes them off.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonRemovalRetried (pooled policy, Normal): the policy that takes
	// a node's released addresses off failed on it, and is written again.
	ReasonRemovalRetried = "RemovalRetried"
	// ReasonEarlierEnactmentDeleted (pooled policy, Normal): before a
	// node's generated policy was created again, the enactment an earlier
	// policy of its name left was deleted: kubernetes-nmstate's handler
	// would have taken it up for the new policy.
	ReasonEarlierEnactmentDeleted = "EarlierEnactmentDeleted"
	// ReasonMachineShutDown (pooled policy, Normal): a deleted Node is
	// tainted node.kubernetes.io/out-of-service: its addresses are let go
	// without its handler's word, kept for its return.
	ReasonMachineShutDown = "MachineShutDown"
	// ReasonAddressesAllocated (pooled policy, Normal): nodes got their
	// addresses; the message says which and how (adopted, returned).
	ReasonAddressesAllocated = "AddressesAllocated"
	// ReasonPoolWriteRetriesExhausted (enactment): every attempt to write a
	// pool met a conflict; the handler tries again later.
	ReasonPoolWriteRetriesExhausted = "PoolWriteRetriesExhausted"
	// ReasonAddressNotMoved (enactment, pooled policy; Warning): a node
	// carries its pool address on an interface its policy no longer puts
	// it on, where it cannot be taken off alone (that family is
	// configured by DHCP or autoconf): it is on two interfaces until an
	// admin takes it off.
	ReasonAddressNotMoved = "AddressNotMoved"
)

// FenceAnnotation is written on an enactment by the pool controller when it
// revokes an address taken for the enactment but never recorded. Writing it
// changes the enactment's resourceVersion, so a handler that stalled between
// taking the address and recording it fails to record it. Its value is
// "<pool>/<ip>@<token>" of the last revoked address, the token being the
// resourceVersion the address was taken under: every fence is a new value,
// so it changes the object even when the same address is revoked twice.
const FenceAnnotation = "nmstate.io/ippool-fence"

// FenceValue is the FenceAnnotation value of the revocation of ip, taken
// from pool under token.
func FenceValue(pool, ip, token string) string {
	return pool + "/" + ip + "@" + token
}

// RefreshStateLabel on a NodeNetworkState asks its node's handler to read
// the network and publish it again (kubernetes-nmstate's label): a new
// value is a new request. The pool controller sets it when it needs
// evidence that a released address is gone; the handler first takes
// released addresses off its interfaces, and publishes even if nothing
// changed.
const RefreshStateLabel = "nmstate.io/force-nns-refresh"

// RequestAnnotation is set by a handler on an enactment it creates for a
// policy with ippool captures, when it leaves new addresses to the pool
// controller. It names the policy's pools, comma-separated, and asks the
// controller to allocate and record an address for each of their captures
// (with the other new enactments, in one pool write per pool) before the
// handler has written anything: a thousand nodes starting at once cost
// no status write each to ask. It counts only while its handler has
// written nothing of its own and the policy controller has not aborted it
// (status.slot.aborted); a request that must wait for a slot is taken
// over by its handler, which asks for the slot itself. Later requests are
// Pending / IPPoolBusy with status.waitingForIPPool.
const RequestAnnotation = "nmstate.io/ippool-request"

// SlotRequestAnnotation is set by a handler on an enactment it creates for
// a policy without ippool captures (value "true"). It asks the policy
// controller for a maxUnavailable slot with the creation, as a
// RequestAnnotation does once its addresses are recorded: a plain node
// costs no status write to ask. It counts as long as a RequestAnnotation
// would. A request that no one answered within the handler's
// failed-requeue period (a minute by default; a policy controller of an
// earlier version does not read this annotation) is asked again by a
// status write of the handler's own, from the same place in the queue.
const SlotRequestAnnotation = "nmstate.io/slot-request"

// PolicyUIDAnnotation is set by a handler on every enactment it creates:
// the UID of the policy it was created for. An enactment whose policy was
// deleted and created again under the same name (a new UID) is ended and
// created anew for the new policy, never taken for it, even when a watch
// missed the deletion.
const PolicyUIDAnnotation = "nmstate.io/policy-uid"

// NudgeAnnotation is written on an enactment by the pool controller when
// its handler should look at a pool again: the pool it waits on
// (status.waitingForIPPool) became available or freed addresses, or the
// pool's range no longer hands out an address the enactment holds. Its
// value says why. Handlers watch only their own enactments, so this is how
// a handler learns that a pool changed; it removes the annotation when it
// looks again. Waiting handlers also look again on their own, less often.
const NudgeAnnotation = "nmstate.io/ippool-nudge"

// PolicyConditionIgnored is the NodeNetworkConfigurationPolicy condition
// type that newer kubernetes-nmstate releases set True, with reason
// NoMatchingNode, on a policy that selects no node; the kubernetes-nmstate
// API module this project pins predates its constant.
const PolicyConditionIgnored = "Ignored"

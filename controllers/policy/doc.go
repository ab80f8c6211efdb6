// Package policy is the control-plane side of a policy's rollout: the one
// writer of what every node of a NodeNetworkConfigurationPolicy shares. It
// runs, leader-elected, in the pool controller's process.
//
// Status. The policy's Available, Degraded and Progressing conditions are
// computed from the enactments of the nodes the policy selects now, with
// kubernetes-nmstate's reasons and messages ("x/y nodes successfully
// configured"). Enactments of nodes that no longer match (a node removed
// or relabelled) do not count, so the status is right after a scale down.
//
// maxUnavailable. A handler asks for a slot in its enactment's status
// (status.slot.requested) once the state to apply is recorded, and applies
// only when the slot is granted (status.slot.granted); it clears the slot
// with the outcome. The controller grants requests, oldest first, while
// fewer than maxUnavailable grants (of the nodes the policy selects,
// rounded up, at least one) are outstanding; a request it cannot grant yet
// is queued (status.slot.queued), and once maxUnavailable nodes gave up on
// the policy's generation every request is aborted (status.slot.aborted).
// Those answers are all it writes of an enactment: its handler shows them
// in the conditions (Pending / MaxUnavailableLimitReached, Aborted). A
// grant older than the slot timeout is taken to belong to a handler that
// died mid-apply and stops counting.
//
// Cost. Events are batched: each one queues its policy after a short delay
// and every event inside that window joins the same reconcile, so a
// rollout of n nodes costs O(n) work and at most one policy status write
// per window, whatever the number of nodes. The handlers never write the
// policy and never read other nodes' enactments.
package policy

// Package pool is the control-plane NodeIPPool controller (docs/protocol.md). It
// runs as a leader-elected Deployment (in handler mode next to the
// enactment controller), and is the only writer of a pool's conditions.
//
// Rebuild. When a pool is created (or re-created), when the controller
// starts, when an admin annotates the pool, a policy or an enactment with
// nmstate.io/reset-ippool, and when the bitmap lacks addresses that
// enactments record (someone cleared it), the controller marks the pool
// Available=Unknown (ReconcilingPool) so that handlers stop taking new
// addresses, quarantines the addresses the annotated policies' and
// enactments' records hold and drops those records (retire.Drop), sets
// every bit that a holder of any kind records on the API server
// (holder.List), and marks the pool Available=True (ReconciledPool), or
// False if it found a collision. It then removes the annotations. A rebuild
// keeps every bit of a status it vouched for (an unvouched status keeps
// only what records and entries hold), and its write is guarded by the
// pool's resourceVersion, so it unions with what handlers wrote meanwhile.
// A rebuild that fails leaves the pool UnsyncronizedIPPool and is retried.
//
// Serving. New addresses are allocated here for every enactment that asks
// (a new enactment's ippoolv1.RequestAnnotation, or Pending / IPPoolBusy):
// all of a pool's requests in one pool write with in-flight entries, then
// one record per enactment under the resourceVersion the entry carries as
// its token, several at a time (serve.go). Waiting enactments are nudged
// when their pool can serve again (nudge.go).
//
// Garbage collection. An address is written to the pool before its holder
// records it, so a set bit that no record of any kind claims may be an
// allocation in flight. The controller times every unclaimed bit it sees
// and frees those unclaimed for longer than GracePeriod (or quarantines
// them, when a node's network still carries them), after checking again on
// the API server that nobody claims them. The clocks live in memory: a
// restarted controller starts them again, which only delays collection.
//
// Conditions. A pool whose range overlaps an older pool's (by creation time,
// then name) is refused with OverlappingIPPool; one whose range cannot hand
// out addresses with InvalidIPPool. Otherwise its Available condition is
// IPCollision when two enactments record one address (naming both nodes and
// interfaces), ExhaustedIPPool while enactments fail for want of an address
// (handlers keep trying such a pool), and ReconciledPool. Every transition
// raises an Event. Status counts are written with every bitmap change.
//
// Correctness never depends on the cache: rebuilds, collection and the
// confirmation of missing bits read from the API server, every write is
// guarded by a resourceVersion, and what the controller did itself is
// remembered rather than read back from a cache that may lag behind.
package pool

// Package pool is the control-plane NodeIPPool controller (DESIGN.md §5). It
// runs as a leader-elected Deployment and is the only writer of a pool's
// conditions.
//
// Rebuild. When a pool is created, when the controller starts, and when the
// pool carries the nmstate.io/reset-ippool annotation, the controller marks
// it Available=Unknown (ReconcilingPool) so that handlers stop allocating,
// sets every bit that an enactment claims, and then marks it
// Available=True (ReconciledPool). A rebuild never clears a bit: a handler
// writes the pool before its enactment, so an unclaimed bit may be an
// allocation in flight. The rebuild's write is guarded by the pool's
// resourceVersion and unions with what handlers wrote meanwhile.
//
// Refusals. A pool whose range overlaps an older pool's (by creation time,
// then name) is refused with OverlappingIPPool; an address claimed by two
// enactments is reported with IPCollision naming both; a range that cannot
// hand out addresses is InvalidIPPool. All are Available=False, so handlers
// wait, and each transition raises an Event.
package pool

// Package enactment is the control-plane side of enactments (NNCEs): it
// does what a node's handler would do when that handler cannot. It runs in
// the pool controller's process, on the control plane.
//
// Scale down. When a Node is deleted its handler is gone with it, so the
// controller retires the node's enactments: it deletes them, removes their
// FinalizerIPPool finalizer and releases their addresses, in the order
// poolwrite.Writer.Retire follows, which is safe even if the node's handler
// is still running and retiring them too. A Node re-created under the same
// name (a new UID) counts as deleted, as it does for Kubernetes' garbage
// collector. Enactments are all looked at when the controller starts, so
// nodes deleted while it was down are found then.
//
// Handlers that are gone. An enactment whose policy is deleted is deleted
// (its handler would do the same); an enactment that stays terminating for
// longer than the grace period, because no handler releases it, is retired
// by the controller.
//
// Reset annotations. An nmstate.io/reset-ippool annotation on an enactment
// or a policy must name a pool; the pool controller acts on those that do.
// One that names no existing pool is removed with a Warning Event saying
// what to write instead.
package enactment

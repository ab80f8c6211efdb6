// Package enactment is the control-plane side of enactments (NNCEs): it is
// the one retirer of enactments: it quarantines their addresses and lets
// them go, for every node, its handler running or not. It runs in the pool
// controller's process, on the control plane, in handler mode.
//
// Scale down. When a Node is deleted its handler is gone with it, so the
// controller retires the node's enactments: it deletes them, quarantines
// their addresses and removes their FinalizerIPPool finalizer, in the order
// retire.Retire follows (quarantine first, then the finalizer), which is
// safe with several retirers at once (replicas, tests); the node's handler,
// if it still runs, only takes the addresses off. A Node re-created under
// the same name (a new UID) counts as deleted, as it does for Kubernetes'
// garbage collector. Enactments are all looked at when the controller
// starts, so nodes deleted while it was down are found then.
//
// Deleted policies and enactments. An enactment whose policy is deleted is
// deleted; every deleted enactment that carries FinalizerIPPool is retired
// at once, and addresses an enactment lists under releasing are taken back
// (retire.Release).
//
// Reset annotations. An nmstate.io/reset-ippool annotation on an enactment
// or a policy must name a pool; the pool controller acts on those that do.
// One that names no existing pool is removed with a Warning Event saying
// what to write instead.
package enactment

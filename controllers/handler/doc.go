// Package handler is the per-node NodeNetworkConfigurationPolicy reconciler:
// one runs on every node (a DaemonSet), with its node's name injected. It
// does what the kubernetes-nmstate handler does — select policies by node
// selector, keep the enactment "<node>.<policy>" and its conditions, apply
// the rendered desired state through nmstatectl, aggregate the policy's
// conditions and honour maxUnavailable — and it resolves the
// "ippool.<pool>.allocate" captures.
//
// Allocation (DESIGN.md §4). For every ippool capture the enactment's record
// (status.ippool and status.capturedStates) is reused while the pool still
// contains the address; otherwise a free offset is taken from the pool's
// status bitmap. All captures of one policy that draw from one pool are
// served by one pool status write, guarded by the pool's resourceVersion; on
// a conflict the pool is read again and the write retried with jittered
// exponential backoff, a bounded number of times, then the request is
// requeued. Nothing is allocated while a pool is not Available=True: only the
// pool controller sets that. The record is written to the enactment before
// anything is applied, so an address that reached a node is always recorded.
//
// Fresh addresses are taken with an in-flight entry in the pool that names
// the enactment and its resourceVersion (the token), and recorded with a
// status update under that token. If the pool controller revoked the entry
// meanwhile (it fences the enactment first), the record fails with a
// conflict: the handler withdraws only entries that still carry its token,
// applies nothing, and allocates again. Before applying, under the node's
// network lock, it confirms that the enactment on the API server is still
// the one it wrote, so an address whose record was removed meanwhile (a
// reset) never reaches the network. See docs/protocol.md.
//
// Releasing. When a policy is deleted, stops matching the node, or drops a
// capture, the handler first removes the record (the enactment, or the
// dropped addresses from it) under the enactment's resourceVersion and then
// quarantines the addresses (package retire); so does the pool controller
// when it retires an enactment of a deleted node or resets one, and of two
// concurrent retirers only one quarantines. The enactment carries the
// FinalizerIPPool finalizer while it holds addresses, so that its record
// outlives a deletion until the addresses are quarantined.
//
// Writers. The handler writes a pool's allocatedOffsets, counts and entries
// through internal/poolwrite, only on a status whose stamp matches; the pool
// controller alone writes pool conditions, ExhaustedIPPool included. A
// handler that finds a pool exhausted marks its enactment Failing
// (IPPoolExhausted) and raises a Warning Event on the pool. It keeps trying
// a pool that is Available=False with ExhaustedIPPool, since addresses may
// have been freed since; other reasons than that one keep it waiting.
//
// Correctness never depends on a fresh cache or on one reconcile at a time:
// enactments and pools are read from the API server where a decision
// depends on them, and every write carries a resourceVersion precondition.
package handler

// Package handler is the per-node NodeNetworkConfigurationPolicy reconciler:
// one runs on every node (a DaemonSet), with its node's name injected. It
// does what the kubernetes-nmstate handler does — select policies by node
// selector, keep the enactment "<node>.<policy>" and its conditions, ask the
// policy controller for a maxUnavailable slot (status.slot) and apply the
// rendered desired state through nmstatectl once it is granted — and it
// resolves the "ippool.<pool>.allocate" captures. It never writes a
// policy's status: the policy controller does.
//
// Allocation (docs/protocol.md). For every ippool capture the
// enactment's record (status.ippool and status.capturedStates) is reused
// while the pool still hands out the address. New addresses are left to
// the pool controller, which serves every waiting enactment of a pool in
// one pool write: a new enactment asks with its creation (the
// ippoolv1.RequestAnnotation, no status write), an older one as
// Pending / IPPoolBusy. The handler never writes a pool (its RBAC has no
// pool writes, docs/protocol.md "Who writes a pool"), but with
// SelfAllocate, the specification's handler allocation: it then takes a
// free offset itself, in one pool status write guarded by the pool's
// resourceVersion, retried on conflicts with jittered exponential
// backoff. Nothing new is allocated while a pool is
// not Available=True: only the pool controller sets that. The record is
// written to the enactment before anything is applied, so an address that
// reached a node is always recorded. The controller writes the record and
// nothing else of the enactment. Once it is complete, a new enactment's
// request asks the policy controller for a slot as it stands
// (enactmentrecord.AsksForSlot), and the handler writes its own fields first with
// its outcome, or, if the policy controller queued the request or granted
// it for an earlier generation of the policy than the one it applies
// (status.slot.policyGeneration), with a request of its own from the same
// place in the queue; so does a new enactment whose request no one
// answered within FailedRequeue. A new
// enactment of a policy without ippool captures asks for its slot with
// its creation at once (ippoolv1.SlotRequestAnnotation). An older
// enactment's handler renders the state and asks for its slot in a write
// of its own. The policy controller
// writes only its answer (status.slot): the handler shows it in the
// conditions.
//
// Whatever is stored in status.desiredState, the handler applies only the
// state it renders, at the apply, from the policy and its own record.
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
// Applying (kubernetes-nmstate's way). Under the network lock: rollback
// (a stale checkpoint), the conditional probes tried once, apply
// --no-commit, every probe polled (package probe), then commit, or
// rollback and the probes again; the outcome names the probe that failed.
// A failed attempt (render, apply, probe) is counted in status.failures
// for the policy's generation and retried after Retry's backoff (Failing /
// Retrying), until the retries are spent (Failing / FailedToConfigure),
// after which the generation is not tried again; nor is one the policy
// controller aborted (Aborted). A new generation starts with fresh
// conditions and count.
//
// Releasing. When a policy is deleted or stops matching the node, the
// handler deletes its enactment (under its UID), and the pool controller
// retires it: it quarantines the addresses, then lets the enactment go
// (package retire). When a policy drops a capture, or the range no longer
// hands out a recorded address, the handler's new record lists it as
// releasing, and the pool controller quarantines it and then removes it
// from the record (retire.Release). The enactment carries the
// FinalizerIPPool finalizer while it holds addresses, so that its record
// outlives a deletion until the addresses are quarantined. Settle takes
// every released address of the node off its interface: the node's state
// reporter runs it before each publication the pool controller asks for,
// and the pool frees the address once the published state shows it gone
// (docs/protocol.md).
//
// Writers. Only with SelfAllocate does the handler write a pool: its
// allocatedOffsets, counts and entries, through internal/allocation/poolwrite, only on
// a status whose stamp matches; by default it writes no pool at all. The
// pool controller alone writes pool conditions, ExhaustedIPPool included. A
// handler that finds a pool exhausted marks its enactment Failing
// (IPPoolExhausted) and raises a Warning Event on the pool. It keeps trying
// a pool that is Available=False with ExhaustedIPPool, since addresses may
// have been freed since; other reasons than that one keep it waiting.
//
// Reads. A reconcile decides on the cache (the policies, this Node, this
// node's enactments); one with nothing to do reads nothing else. A step
// that writes reads its enactment from the API server, whose
// resourceVersion guards every write of the step; a retirement confirms
// the policy and the Node there too. Pools are read from the API server's
// watch cache first, and a missing, unavailable or full pool is confirmed
// on a fresh read before it is reported. Correctness never depends on a
// fresh cache or on one reconcile at a time: every write carries a
// resourceVersion precondition.
package handler

// Package claim is the Cluster API IPAM provider of NodeIPPools: it
// fulfils the IPAddressClaims (ipam.cluster.x-k8s.io, v1beta2 or v1beta1)
// whose spec.poolRef names a NodeIPPool, following the contract of
// Cluster API's IPAM proposal (seeds/004) and today's Cluster API.
//
// One uniqueness domain. A claim's address is taken from the pool's
// bitmap like a node's: in one pool write that adds an in-flight entry
// naming the claim (holder.ForClaim) and the claim's UID as token,
// chosen by the same rules (assign.Chooser: reservations for nodes,
// addresses kept for a node's return, and free addresses that a node's
// NodeNetworkState shows carried are not handed to claims). The
// IPAddress of the claim's name is then created; it is the durable record
// (holder.List reads it as the claim's record), which the pool controller
// counts with every other holder's record in rebuilds, garbage
// collection, collisions, overlaps, the webhook and the plugin, and which
// prunes the in-flight entry. A process
// that dies between the two writes finds its entry again by holder and
// token, and takes the same address.
//
// Release. A claim being deleted quarantines its address (poolwrite
// Writer.Quarantine, naming the node whose NodeNetworkState carries it, if
// any) before its IPAddress goes, then lets the claim go: the address is
// handed to nobody until the pool controller has the evidence the
// quarantine rules ask for.
//
// Protection. Every IPAddress carries capi.ProtectFinalizer; one deleted
// while its claim lives is held by an in-flight entry, let go and created
// again identical.
//
// A claim of a paused Cluster (spec.paused, or the cluster.x-k8s.io/paused
// annotation on the claim) is left alone but for its Paused condition.
// Every refusal shows in the claim's Ready condition (PoolNotReady,
// PoolExhausted, AllocationFailed) with a message that names the pool and
// what to do, and in an Event.
package claim

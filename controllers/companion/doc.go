// Package companion is the controller of pooled policies, which companion
// mode relies on (IP pools for clusters that keep kubernetes-nmstate's
// handler) and handler mode serves too: the pool controller runs it in
// either mode whenever the PooledNodeNetworkConfigurationPolicy CRD is
// installed. The admin writes a PooledNodeNetworkConfigurationPolicy (an
// NNCP's spec, with ippool captures); the controller keeps one plain
// NodeNetworkConfigurationPolicy per selected node, which the node's
// handler applies (kubernetes-nmstate's, in companion mode).
//
// Records. The addresses each node holds are recorded in the pooled
// policy's status.nodes, which only this controller writes (the admin
// writes the spec, kubernetes-nmstate's handler writes only its own
// NNCPs' and enactments' status). The pool controller, the webhook and the
// plugin read each node's as the record of holder.ForPolicyNode(policy,
// node) (holder.OfPolicyNode), as they read every holder's.
//
// Order of writes, so that no address is ever held by nobody while a NIC
// may carry it, nor by two:
//   - allocate: one pool write per pool for every node that lacks an
//     address (in-flight entries naming the node's holder, with the pooled
//     policy's resourceVersion as token, which the pool controller fences
//     by writing the policy; assign.Chooser gives reservations, addresses
//     kept for a returning node, and addresses the node already carries,
//     so that moving from per-node NNCPs renumbers nothing), then the
//     record in the status, then the generated NNCP;
//   - release (node no longer selected, policy deleted, reset): the
//     address is quarantined first (poolwrite Writer.Quarantine, the node
//     as holder: its NodeNetworkState is the evidence), then the node is
//     marked releasing, then its NNCP is changed to a state that takes
//     only those addresses off its interfaces (kubernetes-nmstate never
//     undoes a deleted policy), and once its handler has applied it the
//     record and the NNCP go;
//   - a Node that is gone: quarantine (its addresses are kept for its
//     return), drop the record, delete the NNCP.
//
// Rollout. The changes to the generated NNCPs are paced by the pooled
// policy's maxUnavailable, as one policy's nodes would be: no more nodes
// than that are progressing (an NNCP created or changed whose enactment,
// "<node>.<nncp>", has not reached its generation as Available, Failing
// or Aborted) at once, an NNCP is never changed while it progresses
// (kubernetes-nmstate's admission refuses it), and once as many nodes
// failed as maxUnavailable, no further node is configured. The status
// sums the nodes up in kubernetes-nmstate's words
// (internal/rollout/policystatus).
//
// Resets. The annotation nmstate.io/reset-ippool=<pool> on the pooled
// policy resets every node's addresses from that pool, on a generated NNCP
// that node's: they are quarantined (for nobody's return) and new ones
// allocated; the annotation is removed when done.
package companion

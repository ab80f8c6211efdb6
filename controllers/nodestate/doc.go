// Package nodestate publishes a node's network state as its
// NodeNetworkState (NNS), as the kubernetes-nmstate handler does: one
// reconciler per handler process, for its own node.
//
// The NNS is named after the node and owned by it, so it goes with the
// node. Its status.currentState is what nmstatectl show reports. It is
// written when the state or its conditions change, never as a heartbeat:
// the reporter looks every Refresh period, and at once when Refreshes says
// the node's network may have changed (after every apply). When show
// fails, the NNS keeps the last state it had and turns Failing with
// nmstatectl's output.
//
// It is also the evidence that a released address left the node (see
// docs/protocol.md): the first publication after a start, one the pool
// controller asks for (the nmstate.io/force-nns-refresh label, which it
// sets when it quarantines an address of the node) are made even if
// nothing changed, after Settle has taken
// released addresses off the interfaces; each is stamped later than the
// one before; and the reporter holds the node's network lock from Settle
// to its write, so no apply of the handler falls between the read and the
// publication.
package nodestate

// Package nodestate publishes a node's network state as its
// NodeNetworkState (NNS), as the kubernetes-nmstate handler does: one
// reconciler per handler process, for its own node.
//
// The NNS is named after the node and owned by it, so it goes with the
// node. Its status.currentState is what nmstatectl show reports. It is
// written only when the state or its conditions change
// (status.lastSuccessfulUpdateTime is the time of the last such write after
// a successful read), never as a heartbeat: the reporter looks every
// Refresh period, and at once when Nudges says the node's network may have
// changed (after every apply). When show fails, the NNS keeps the last
// state it had and turns Failing with nmstatectl's output.
package nodestate

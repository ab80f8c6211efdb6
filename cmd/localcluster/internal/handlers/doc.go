// Package handlers runs the handler of simulated nodes, one process per
// node: nmstate-ippool's (which asks the pool controller for addresses),
// or kubernetes-nmstate's, unmodified, with what it needs of a node.
package handlers

import "github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"

// cluster is the local cluster this package works on.
type cluster struct{ *state.Cluster }

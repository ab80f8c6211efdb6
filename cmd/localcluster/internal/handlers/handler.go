package handlers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// Handler is the handler program of simulated nodes: ours, or
// kubernetes-nmstate's (up --handler upstream). The calls come in this
// order: Prepare, once when the cluster comes up or its nodes switch to
// this handler (localcluster handler use); then, per node, Start, which
// returns once the handler serves, and Stop, when the node is removed,
// its handler restarted or the nodes switch away; Gone, right after a
// removed node's Node is deleted, does what the cluster would do of the
// objects of a deleted Node; Retire, last, when the nodes switch to the
// other handler, after every Stop.
type Handler interface {
	Prepare(ctx context.Context, k client.Client) error
	Start(ctx context.Context, k client.Client, node string) error
	Stop(ctx context.Context, k client.Client, node string, crash bool) error
	Gone(ctx context.Context, k client.Client, node string) error
	Retire(ctx context.Context, k client.Client) error
}

// For returns the handler of the cluster's simulated nodes.
func For(s *state.Cluster) Handler {
	c := &cluster{s}
	if c.Handler == state.HandlerUpstream {
		return upstreamHandler{c}
	}
	return ourHandler{c}
}

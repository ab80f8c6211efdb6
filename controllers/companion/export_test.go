package companion

import (
	"context"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// ClearEarlier lets the tests that run against the API server call
// clearEarlier, whose delete precondition the fake client ignores.
func (r *Reconciler) ClearEarlier(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy, node, name string) error {
	return r.clearEarlier(ctx, p, node, name)
}

// Cleared reports whether clearEarlier remembers the enactment name as
// deleted.
func (r *Reconciler) Cleared(name string) bool {
	_, ok := r.cleared.Load(name)
	return ok
}

// ProgressPoll is how often a pooled policy whose rollout is not done is
// looked at again while nothing else brings it back.
const ProgressPoll = progressPoll

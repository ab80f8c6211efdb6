package poolcontroller

// The room's entry points: what the command and the other rooms call.

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// cluster is the local cluster this package works on.
type cluster struct{ *state.Cluster }

// Start starts every pool controller replica that does not run; with
// several, they elect a leader.
func Start(ctx context.Context, s *state.Cluster) error {
	return (&cluster{s}).startPoolController(ctx)
}

// Restart stops the pool controller (killed, with crash) and starts it
// again: of several replicas, the one that leads. It returns the name of
// the replica it restarted.
func Restart(ctx context.Context, s *state.Cluster, crash bool) (string, error) {
	return (&cluster{s}).restartPoolController(ctx, crash)
}

// Stop stops every replica and removes the webhook, which no one would
// answer.
func Stop(ctx context.Context, s *state.Cluster, k client.Client) error {
	return (&cluster{s}).stopPoolController(ctx, k)
}

// InstallWebhook installs the NodeIPPool webhook's configuration, calling
// the first replica with the certificates of keys.
func InstallWebhook(ctx context.Context, s *state.Cluster, keys pki.Keys) error {
	return (&cluster{s}).installWebhook(ctx, keys)
}

// Replace stops every replica and starts them again from the cluster's
// programs (s.Bin), as a rollout of a new version does; the webhook's
// configuration stays, the first replica serving it on the same port.
func Replace(ctx context.Context, s *state.Cluster) error {
	c := &cluster{s}
	if err := c.stopReplicas(); err != nil {
		return err
	}
	return c.startPoolController(ctx)
}

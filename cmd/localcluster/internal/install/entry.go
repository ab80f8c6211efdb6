package install

// The room's entry points: what the command and the other rooms call.

import (
	"context"
	"io"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// cluster is the local cluster this package works on.
type cluster struct{ *state.Cluster }

// Run installs nmstate-ippool on a cluster of real nodes: the chart with
// Helm if o.Helm is set, the overlay with kubectl apply -k otherwise. It
// returns once the handler and pool controller pods run.
func Run(ctx context.Context, s *state.Cluster, o Options, out io.Writer) error {
	c := &cluster{s}
	if o.Helm != "" {
		return c.installChart(ctx, o, out)
	}
	return c.install(ctx, o, out)
}

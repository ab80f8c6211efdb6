// Package nodes runs the local cluster's nodes: simulated ones (a Node,
// marked Ready and kept so by heartbeats, a simulated network and a
// handler process) or real ones (a network namespace on a bridge, with a
// containerd, a kubelet and a kube-proxy each).
package nodes

import (
	"context"
	"io"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// cluster is the local cluster this package works on.
type cluster struct{ *state.Cluster }

// AddSimulated adds a simulated node: its Node, marked Ready, and its
// handler, started.
func AddSimulated(ctx context.Context, s *state.Cluster, k client.Client, name string) error {
	return (&cluster{s}).addNode(ctx, k, name, nil)
}

// CheckRealPrerequisites fails, saying what is missing, on a machine that
// cannot run real nodes.
func CheckRealPrerequisites(s *state.Cluster) error { return (&cluster{s}).checkRealPrerequisites() }

// SetupHost creates the bridge the real nodes hang off.
func SetupHost(s *state.Cluster) error { return (&cluster{s}).setupHost() }

// AddReal adds a real node: its network namespace, containerd, kubelet
// and kube-proxy, then its labels.
func AddReal(ctx context.Context, s *state.Cluster, k client.Client, name string, labels map[string]string, out io.Writer) error {
	return (&cluster{s}).addRealNode(ctx, k, name, labels, out)
}

// DownReal stops every real node and removes the host's network, and
// returns the nodes it stopped.
func DownReal(s *state.Cluster) ([]string, error) { return (&cluster{s}).downReal() }

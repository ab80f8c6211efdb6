package nodes

// The room's entry points: what the command and the other rooms call.

import (
	"context"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// Reregister creates the Node of every simulated node whose machine runs
// and whose Node the API server does not have (after etcd was restored
// from an earlier snapshot, or emptied), with the default labels, as its
// kubelet registers it again; it returns the nodes it registered.
func Reregister(ctx context.Context, s *state.Cluster, k client.Client) ([]string, error) {
	var registered []string
	for _, name := range s.PoweredOn() {
		err := k.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
		if !apierrors.IsNotFound(err) {
			if err != nil {
				return registered, err
			}
			continue
		}
		if err := register(ctx, k, name, nil); err != nil {
			return registered, err
		}
		registered = append(registered, name)
	}
	return registered, nil
}

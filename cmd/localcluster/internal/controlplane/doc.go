// Package controlplane runs the local cluster's control plane: etcd,
// kube-apiserver, the CRDs, and the Kubernetes controllers that run beside
// the nodes (for simulated nodes the garbage collector, the node lifecycle
// controller and the process that posts the nodes' heartbeats; for real
// nodes kube-controller-manager and kube-scheduler), and for real nodes
// the image registry they pull from.
package controlplane

import (
	"context"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// cluster is the local cluster this package works on.
type cluster struct{ *state.Cluster }

// StartEtcd starts etcd and waits until it is healthy.
func StartEtcd(ctx context.Context, s *state.Cluster) error { return (&cluster{s}).startEtcd(ctx) }

// StartAPIServer starts kube-apiserver on a free port, with the
// certificates of keys, writes the admin's kubeconfig and waits until it
// is ready.
func StartAPIServer(ctx context.Context, s *state.Cluster, keys pki.Keys) error {
	return (&cluster{s}).startAPIServer(ctx, keys)
}

// RestartAPIServer stops kube-apiserver (killed, with crash) and starts it
// again on the same port.
func RestartAPIServer(ctx context.Context, s *state.Cluster, crash bool) error {
	return (&cluster{s}).restartAPIServer(ctx, crash)
}

// InstallCRDs creates nmstate-ippool's CRDs and those of up --crd, and
// waits until they serve.
func InstallCRDs(ctx context.Context, s *state.Cluster) error { return (&cluster{s}).installCRDs(ctx) }

// StartSimulatedControllers starts, beside simulated nodes, the garbage
// collector and the node lifecycle controller, and the process that posts
// the nodes' heartbeats.
func StartSimulatedControllers(ctx context.Context, s *state.Cluster) error {
	return (&cluster{s}).startSimulatedControllers(ctx)
}

// StartKubeControllers starts, beside real nodes, kube-controller-manager
// and kube-scheduler.
func StartKubeControllers(ctx context.Context, s *state.Cluster) error {
	return (&cluster{s}).startKubeControllers(ctx)
}

// StartRegistry starts the image registry that serves the real nodes.
func StartRegistry(ctx context.Context, s *state.Cluster) error {
	return (&cluster{s}).startRegistry(ctx)
}

package controlplane

// The room's entry points: what the command and the other rooms call.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

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

// SnapshotEtcd saves a snapshot of etcd into snapshots/NAME.db of the
// cluster's directory, as a control plane's backup does (etcdctl snapshot
// save): nothing stops.
func SnapshotEtcd(ctx context.Context, s *state.Cluster, name string) error {
	c := &cluster{s}
	file := c.Path("snapshots", name+".db")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return c.etcdTool(ctx, "etcdctl", "--endpoints="+c.Etcd, "snapshot", "save", file)
}

// RestoreEtcd restores etcd from snapshots/NAME.db as Kubernetes'
// procedure does: kube-apiserver and etcd stop, etcd's data is restored
// from the snapshot (etcdutl snapshot restore), etcd and kube-apiserver
// start again, and the Kubernetes controllers beside the nodes restart,
// their caches being of a later state. The cluster's own components are
// the caller's to restart.
func RestoreEtcd(ctx context.Context, s *state.Cluster, name string) error {
	c := &cluster{s}
	file := c.Path("snapshots", name+".db")
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("no snapshot %s: take it with 'localcluster etcd snapshot %s'", name, name)
	}
	err := c.withEtcdStopped(ctx, func(data, peerURL string) error {
		restored := data + ".restored"
		if err := os.RemoveAll(restored); err != nil {
			return err
		}
		// Kubernetes' procedure: the revision jumps past every one a
		// watcher saw, and what lies before is compacted, so that every
		// cache lists again instead of taking the restored state for an
		// earlier one.
		err := c.etcdTool(ctx, "etcdutl", "snapshot", "restore", file, "--data-dir="+restored, "--name=local",
			"--initial-cluster=local="+peerURL, "--initial-advertise-peer-urls="+peerURL,
			"--bump-revision=1000000000", "--mark-compacted")
		if err != nil {
			return err
		}
		if err := os.RemoveAll(data); err != nil {
			return err
		}
		return os.Rename(restored, data)
	})
	if err != nil {
		return err
	}
	return c.restartSimulatedControllers(ctx)
}

// CRDs are the CRDs a cluster installs, read from their files (ReadCRDs).
type CRDs []*apiextensionsv1.CustomResourceDefinition

// ReadCRDs reads the CRDs the cluster installs (this version's, those of
// its CRD directory, those of up --crd): a restore reads them before it
// stops or empties anything.
func ReadCRDs(s *state.Cluster) (CRDs, error) { return (&cluster{s}).crds() }

// WipeEtcd empties etcd, as a control plane rebuilt from nothing is, then
// installs crds again and restarts the Kubernetes controllers beside the
// nodes. The cluster's own components are the caller's to restart.
func WipeEtcd(ctx context.Context, s *state.Cluster, crds CRDs) error {
	c := &cluster{s}
	if err := c.withEtcdStopped(ctx, func(data, _ string) error { return os.RemoveAll(data) }); err != nil {
		return err
	}
	if err := c.install(ctx, crds); err != nil {
		return err
	}
	return c.restartSimulatedControllers(ctx)
}

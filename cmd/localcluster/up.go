package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/controlplane"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/nodes"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// upOptions are the flags of "up".
type upOptions struct {
	dir, bin, assets string
	nodes            int
	kubelets         int
	images           string
	gracePeriod      time.Duration
	quarantine       time.Duration
	controllers      int
	handler          string
	peerHandler      string
	retries          int // -1: the handlers' default
	// crds are CRD files installed with ours before any controller starts
	// (Cluster API's IPAM CRDs, whose claims the pool controller serves
	// only when they are there at its start).
	crds []string
	// crdDir, if set, holds the CRD files installed instead of
	// localcluster's own: another version's deploy/crd.
	crdDir string
	// companion runs the pool controller in companion mode beside
	// kubernetes-nmstate's handler.
	companion bool
	// selfAllocate runs our handlers with --self-allocate.
	selfAllocate bool
	// garbageCollector runs Kubernetes' garbage collector beside
	// simulated nodes.
	garbageCollector bool
	// nodeLifecycle posts the simulated nodes' heartbeats and runs
	// Kubernetes' node lifecycle controller, whose grace period is
	// nodeGracePeriod.
	nodeLifecycle   bool
	nodeGracePeriod time.Duration
}

// up starts a local cluster and leaves it running. If a step fails, it
// stops what it started.
func up(ctx context.Context, o upOptions, out io.Writer) error {
	if old, err := state.Load(o.dir); err == nil && len(old.Running()) > 0 {
		return fmt.Errorf("a local cluster is already up in %s (%v): run 'localcluster down' first", o.dir, old.Running())
	}
	c := &state.Cluster{Dir: o.dir, Bin: o.bin, Assets: o.assets, GracePeriod: o.gracePeriod.String(),
		QuarantinePeriod: o.quarantine.String(), Controllers: o.controllers, Processes: map[string]*process.Process{},
		Handler: o.handler, PeerHandler: o.peerHandler, ExtraCRDs: o.crds, CRDDir: o.crdDir, Companion: o.companion, SelfAllocate: o.selfAllocate, GarbageCollector: o.garbageCollector,
		NodeLifecycle: o.nodeLifecycle, NodeGracePeriod: o.nodeGracePeriod.String()}
	if o.retries >= 0 {
		c.Retries = &o.retries
	}
	if o.kubelets > 0 {
		c.Real = &state.RealCluster{Images: o.images, Nodes: map[string]*state.RealNode{}}
		if err := nodes.CheckRealPrerequisites(c); err != nil {
			return err
		}
	}
	if err := checkBinaries(c); err != nil {
		return err
	}
	if err := clean(c); err != nil {
		return err
	}
	n := o.nodes
	if c.Real != nil {
		n = o.kubelets
	}
	if err := bootstrap(ctx, c, n, out); err != nil {
		if _, _, stopErr := stopEverything(c); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return fmt.Errorf("%w\n(stopped what was started; logs are in %s)", err, c.Path("logs"))
	}
	fmt.Fprintf(out, "\nThe local cluster is up. Try:\n  export KUBECONFIG=%s\n  kubectl get nodes\n  localcluster status --dir %s\n",
		c.Kubeconfig(), c.Dir)
	if c.Real != nil {
		fmt.Fprintf(out, "Its nodes run no handler yet: install nmstate-ippool with\n  localcluster install --dir %s\n", c.Dir)
	}
	return nil
}

// checkBinaries fails early, saying how to build, when a program is
// missing.
func checkBinaries(c *state.Cluster) error {
	programs := []string{filepath.Join(c.Assets, "etcd"), filepath.Join(c.Assets, "kube-apiserver")}
	if c.Real == nil { // real nodes run them from their images
		programs = append(programs, filepath.Join(c.Bin, "handler"), filepath.Join(c.Bin, "pool-controller"), filepath.Join(c.Bin, "nmstatectl-sim"))
	}
	if (c.GarbageCollector || c.NodeLifecycle) && c.Real == nil {
		programs = append(programs, filepath.Join(c.Assets, "kube-controller-manager"))
	}
	if c.Handler == state.HandlerUpstream {
		if _, err := os.Stat(c.PeerHandler); err != nil {
			return fmt.Errorf("%s not found: run 'make peer-handler' (it builds kubernetes-nmstate's handler from ../shared/peers)", c.PeerHandler)
		}
	}
	for _, p := range programs {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found: run 'make build envtest-assets' (or set --bin and --assets)", p)
		}
	}
	return nil
}

// clean removes what an earlier cluster in the directory left, and only
// that: the directory may hold other things.
func clean(c *state.Cluster) error {
	// Real nodes of a cluster that was not taken down leave mounts there.
	if err := nodes.UnmountUnder(c.Path("real")); err != nil {
		return err
	}
	for _, name := range []string{"etcd", "pki", "nodes", "real", "logs", "kubeconfig", state.StateFile} {
		if err := os.RemoveAll(c.Path(name)); err != nil {
			return err
		}
	}
	return os.MkdirAll(c.Dir, 0o755)
}

// handlerSetup names the step that prepares the simulated nodes' handler.
func handlerSetup(c *state.Cluster) string {
	if c.Handler == state.HandlerUpstream && c.Companion {
		return "companion controller"
	}
	if c.Handler == state.HandlerUpstream {
		return "upstream handler"
	}
	return "pool-controller"
}

// bootstrap starts the control plane and n nodes. Simulated nodes come
// with the CRDs and one handler process per node, ours with the pool
// controller and its webhook, kubernetes-nmstate's alone.
// Real nodes come with the Kubernetes controllers and kubelets; the
// handler and the pool controller come with the install (localcluster
// install).
func bootstrap(ctx context.Context, c *state.Cluster, n int, out io.Writer) error {
	keys := pki.Keys{Dir: c.Path("pki")}
	if err := keys.Generate(state.RealHostIP); err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}
	type startStep struct {
		name string
		run  func(context.Context, *state.Cluster) error
	}
	etcd := startStep{"etcd", controlplane.StartEtcd}
	apiServer := startStep{"kube-apiserver", func(ctx context.Context, c *state.Cluster) error {
		return controlplane.StartAPIServer(ctx, c, keys)
	}}
	steps := []startStep{etcd, apiServer,
		{"CRDs", controlplane.InstallCRDs},
		{"kube-controllers", controlplane.StartSimulatedControllers},
		{handlerSetup(c), func(ctx context.Context, c *state.Cluster) error {
			k, err := c.Client()
			if err != nil {
				return err
			}
			return handlers.For(c).Prepare(ctx, k)
		}},
	}
	addNode := func(k client.Client, i int) error {
		name := fmt.Sprintf("node%02d", i)
		return state.Step(out, "node "+name, func() error { return nodes.AddSimulated(ctx, c, k, name) })
	}
	if c.Real != nil {
		steps = []startStep{
			{"host network", func(_ context.Context, c *state.Cluster) error { return nodes.SetupHost(c) }},
			{"image registry", controlplane.StartRegistry},
			etcd, apiServer,
			{"kube-controllers", controlplane.StartKubeControllers},
		}
		addNode = func(k client.Client, i int) error {
			return nodes.AddReal(ctx, c, k, fmt.Sprintf("real%02d", i), nil, out)
		}
	}
	for _, s := range steps {
		if err := state.Step(out, s.name, func() error { return s.run(ctx, c) }); err != nil {
			return err
		}
	}
	k, err := c.Client()
	if err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		if err := addNode(k, i); err != nil {
			return err
		}
	}
	return nil
}

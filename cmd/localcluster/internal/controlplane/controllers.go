package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// startSimulatedControllers starts, beside simulated nodes, what a
// cluster runs that the local cluster would otherwise lack:
// kube-controller-manager with the garbage collector (dependents deleted
// with their owners, --cascade=foreground and orphan as in a cluster)
// and the node lifecycle controller, with the kubelets process that posts
// the nodes' heartbeats. Its own user may only list and watch: each
// controller acts with its service account's credentials.
func (c *cluster) startSimulatedControllers(ctx context.Context) error {
	if c.Real != nil {
		return nil
	}
	var controllers []string
	if c.GarbageCollector {
		controllers = append(controllers, "garbagecollector")
	}
	if c.NodeLifecycle {
		if err := c.startKubelets(); err != nil {
			return err
		}
		controllers = append(controllers, "nodelifecycle")
	}
	if len(controllers) == 0 {
		return nil
	}
	args := []string{"--controllers=" + strings.Join(controllers, ","), "--use-service-account-credentials=true", "--authentication-skip-lookup"}
	if c.NodeLifecycle {
		args = append(args, "--node-monitor-grace-period="+c.NodeGracePeriod, "--node-monitor-period=1s")
	}
	return c.startKubeComponent(ctx, "kube-controller-manager", args...)
}

// restartSimulatedControllers stops what startSimulatedControllers
// started and starts it again.
func (c *cluster) restartSimulatedControllers(ctx context.Context) error {
	for _, name := range []string{"kube-controller-manager", state.KubeletsName} {
		if p := c.Processes[name]; p.Alive() {
			if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
				return fmt.Errorf("stop %s: %w", name, err)
			}
		}
	}
	return c.startSimulatedControllers(ctx)
}

// startKubelets starts the process that posts the simulated nodes'
// heartbeats: this program, "localcluster kubelets".
func (c *cluster) startKubelets() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return c.Launch(state.KubeletsName, &process.Process{Binary: exe, Log: c.Path("logs", state.KubeletsName+".log"),
		Args: []string{state.KubeletsName, "--dir", c.Dir}})
}

// startKubeControllers starts kube-controller-manager (garbage collector,
// DaemonSet, Deployment, ReplicaSet, service account and endpoint
// controllers, among others) and kube-scheduler. Node IPAM is off: each
// node's pod range is in its CNI configuration. The node lifecycle
// controller runs: it lifts the not-ready taint a new Node is created
// with.
func (c *cluster) startKubeControllers(ctx context.Context) error {
	keys := pki.Keys{Dir: c.Path("pki")}
	err := c.startKubeComponent(ctx, "kube-controller-manager",
		"--service-account-private-key-file="+keys.Path("sa.key"), "--root-ca-file="+keys.Path("ca.crt"),
		"--controllers=*,-nodeipam", "--use-service-account-credentials=true",
		"--cluster-cidr="+state.RealPodRange, "--authentication-skip-lookup")
	if err != nil {
		return err
	}
	return c.startKubeComponent(ctx, "kube-scheduler")
}

// startKubeComponent starts one of Kubernetes' control-plane components
// (kube-controller-manager, kube-scheduler) from the assets, on loopback
// with the cluster's certificates, and waits until it is healthy.
func (c *cluster) startKubeComponent(ctx context.Context, name string, args ...string) error {
	keys := pki.Keys{Dir: c.Path("pki")}
	port, err := process.FreePort()
	if err != nil {
		return err
	}
	kubeconfig := c.Path(name + ".kubeconfig")
	if err := keys.WriteKubeconfig(kubeconfig, c.APIServer, name); err != nil {
		return err
	}
	p := &process.Process{Binary: filepath.Join(c.Assets, name), Log: c.Path("logs", name+".log"),
		Health: fmt.Sprintf("https://%s/healthz", process.HostPort(port)),
		Args: append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false",
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
			"--tls-cert-file=" + keys.Path("loopback.crt"), "--tls-private-key-file=" + keys.Path("loopback.key"),
		}, args...)}
	if err := c.Launch(name, p); err != nil {
		return err
	}
	probe, err := adminProbe(keys, p.Health)
	if err != nil {
		return err
	}
	return p.Ready(ctx, time.Minute, probe)
}

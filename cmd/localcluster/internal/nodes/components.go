package nodes

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

func (c *cluster) containerdSocket(node string) string {
	return c.RealNodeDir(node, "containerd.sock")
}

// startContainerd writes the node's containerd and CNI configuration and
// starts containerd in the node's namespace.
func (c *cluster) startContainerd(ctx context.Context, name string, n state.RealNode) error {
	dir := c.RealNodeDir(name)
	for _, d := range []string{"cni", "cni-ipam", "containerd-root", "containerd-state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	// restrict_oom_score_adj: this sandbox may not lower oom_score_adj,
	// which the pod sandboxes ask for (runc then fails to start them).
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[5]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[6]q
`, filepath.Join(dir, "containerd-root"), filepath.Join(dir, "containerd-state"), c.containerdSocket(name),
		state.SandboxImage, filepath.Join(dir, "cni"), filepath.Join(dir, "certs.d"))
	if err := writeMirrors(filepath.Join(dir, "certs.d")); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "ippool-pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, filepath.Join(dir, "cni-ipam"), n.PodCIDR())
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(config), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cni", "10-pods.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	p := &process.Process{Binary: bin, NetNS: n.Netns(), Log: c.Path("logs", "containerd-"+name+".log"),
		Args: []string{"--config", filepath.Join(dir, "containerd.toml")}}
	if err := c.Launch(state.ContainerdName(name), p); err != nil {
		return err
	}
	return p.Ready(ctx, time.Minute, func(context.Context) error { return c.ctr(name, "version") })
}

// ctr runs ctr against a node's containerd, in the namespace of the
// kubelet's containers.
func (c *cluster) ctr(node string, args ...string) error {
	return runCmd("ctr", append([]string{"--address", c.containerdSocket(node), "--namespace", "k8s.io"}, args...)...)
}

// mirroredRegistries are the registries the images of make images-local
// name, which the nodes pull from the cluster's registry instead.
var mirroredRegistries = []string{"localhost", "registry.k8s.io"}

// writeMirrors writes containerd's host configuration (hosts.toml) that
// sends the node's pulls from mirroredRegistries to the cluster's
// registry, over plain HTTP.
func writeMirrors(dir string) error {
	registry := "http://" + net.JoinHostPort(state.RealHostIP, state.RealRegistryPort)
	for _, host := range mirroredRegistries {
		if err := os.MkdirAll(filepath.Join(dir, host), 0o755); err != nil {
			return err
		}
		hosts := fmt.Sprintf("server = %[1]q\n\n[host.%[1]q]\n  capabilities = [\"pull\", \"resolve\"]\n", registry)
		if err := os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nodeKubeconfig writes the kubeconfig of one of a node's components,
// with the client certificate of identity and the API server at its
// address on the bridge.
func (c *cluster) nodeKubeconfig(node, identity string) (string, error) {
	path := c.RealNodeDir(node, identity+".kubeconfig")
	_, port, err := net.SplitHostPort(strings.TrimPrefix(c.APIServer, "https://"))
	if err != nil {
		return "", err
	}
	return path, pki.Keys{Dir: c.Path("pki")}.WriteKubeconfig(path, "https://"+net.JoinHostPort(state.RealHostIP, port), identity)
}

// startKubeProxy starts the node's kube-proxy (iptables mode), which makes
// the Services, the API server's among them, reachable from the node and
// its pods.
func (c *cluster) startKubeProxy(ctx context.Context, name string, n state.RealNode) error {
	kubeconfig, err := c.nodeKubeconfig(name, "kube-proxy")
	if err != nil {
		return err
	}
	// conntrack 0: leave the kernel's settings, which a namespace may
	// not change.
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
bindAddress: %q
healthzBindAddress: %q
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: %q
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, name, n.IP(), n.IP()+":10256", state.RealPodRange)
	path := c.RealNodeDir(name, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	p := &process.Process{Binary: filepath.Join(c.Assets, "kube-proxy"), NetNS: n.Netns(), Log: c.Path("logs", "kube-proxy-"+name+".log"),
		Health: "http://" + n.IP() + ":10256/livez", Args: []string{"--config=" + path}}
	if err := c.Launch(state.KubeProxyName(name), p); err != nil {
		return err
	}
	// kube-proxy's health endpoint answers once it runs; it is healthy
	// only after its first sync, which needs the Node.
	return p.Ready(ctx, time.Minute, process.Answers(p.Health))
}

// startKubelet starts the node's kubelet and waits until its Node is
// Ready. The configuration fits this machine: cgroup v1 with the cgroupfs
// driver and no QoS cgroups, no swap check and no eviction (several
// kubelets share the host's disk and memory), and no image garbage
// collection (the images cannot be pulled again). It authenticates as
// system:node:NAME, so that the Node authorizer and NodeRestriction hold
// it to its own node, and it asks the API server whom to let in
// (webhook authentication and authorization).
func (c *cluster) startKubelet(ctx context.Context, k client.Client, name string, n state.RealNode) error {
	keys := pki.Keys{Dir: c.Path("pki")}
	if err := keys.IssueKubelet(name); err != nil {
		return fmt.Errorf("node %s: the kubelet's certificate: %w", name, err)
	}
	kubeconfig, err := c.nodeKubeconfig(name, pki.KubeletIdentity(name))
	if err != nil {
		return err
	}
	root := c.RealNodeDir(name, "kubelet")
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
address: %q
healthzBindAddress: %q
readOnlyPort: 0
containerRuntimeEndpoint: %q
podLogsDir: %q
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
serializeImagePulls: false
`, keys.Path("ca.crt"), n.IP(), n.IP(), "unix://"+c.containerdSocket(name), filepath.Join(root, "pod-logs"))
	path := c.RealNodeDir(name, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	p := &process.Process{Binary: filepath.Join(c.Assets, "kubelet"), NetNS: n.Netns(), Log: c.Path("logs", "kubelet-"+name+".log"),
		Args: []string{"--config=" + path, "--kubeconfig=" + kubeconfig, "--hostname-override=" + name,
			"--node-ip=" + n.IP(), "--root-dir=" + root, "--cert-dir=" + filepath.Join(root, "pki"), "--v=1"}}
	if err := c.Launch(state.KubeletName(name), p); err != nil {
		return err
	}
	return p.Ready(ctx, 2*time.Minute, func(ctx context.Context) error { return nodeReady(ctx, k, name) })
}

// nodeReady fails until the Node is Ready.
func nodeReady(ctx context.Context, k client.Client, name string) error {
	var node corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	if !ready(&node) {
		return fmt.Errorf("node %s is not Ready", name)
	}
	return nil
}

// labelNode adds labels to a Node, as kubeadm does for the roles a kubelet
// may not give itself.
func labelNode(ctx context.Context, k client.Client, name string, labels map[string]string) error {
	var node corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	maps.Copy(node.Labels, labels)
	if err := k.Patch(ctx, &node, patch); err != nil {
		return fmt.Errorf("label node %s: %w", name, err)
	}
	return nil
}

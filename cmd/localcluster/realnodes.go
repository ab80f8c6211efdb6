package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A cluster with real nodes (up --kubelets K) runs, beside etcd and the
// API server, kube-controller-manager and kube-scheduler on the host, and
// per node a network namespace with a containerd, a kubelet and a
// kube-proxy. The nodes' namespaces hang off a bridge on the host, where
// the API server listens; each node routes its pods (CNI bridge plugin,
// host-local addresses) and the host routes every node's pod range
// through it. The handler and the pool controller are not processes of
// localcluster then: `localcluster install` runs the install of
// deploy/local, and they run as pods.
const (
	// realBridge joins the nodes' namespaces; realHostIP, its address, is
	// where they reach the API server.
	realBridge = "ippool-br0"
	realHostIP = "10.89.0.1"
	// realPodRange holds each node's pod range, 10.90.<index>.0/24.
	realPodRange = "10.90.0.0/16"
	// simStateHostDir is where the handler pods of deploy/local keep each
	// node's simulated network (a hostPath there).
	simStateHostDir = "/var/lib/nmstate-ippool-local"
	// dbusSocket is the host path the handler DaemonSet mounts, as a
	// socket. The nodes have no NetworkManager; the path must only exist.
	dbusSocket = "/run/dbus/system_bus_socket"
	// sandboxImage is the pause image of make images-local, which the
	// nodes' containerd runs pod sandboxes with.
	sandboxImage = "registry.k8s.io/pause:3.10"
	// maxRealNodes bounds the node index: it is an octet of the addresses.
	maxRealNodes = 200
)

// realImages are the image tarballs make images-local writes; every node
// imports them into its containerd.
var realImages = []string{"pause.tar", "handler.tar", "pool-controller.tar"}

// realCluster is the state of a cluster with real nodes.
type realCluster struct {
	// Images is the directory of the image tarballs.
	Images string `json:"images"`
	// Nodes by name; a removed node stays, marked.
	Nodes map[string]*realNode `json:"nodes"`
	// DBusSocket is set if localcluster created dbusSocket, and removes it
	// on down.
	DBusSocket bool `json:"dbusSocket,omitempty"`
}

// realNode is one kubelet's node.
type realNode struct {
	// Index numbers the node's addresses: 10.89.0.<10+index> on the bridge
	// and the pod range 10.90.<index>.0/24.
	Index   int  `json:"index"`
	Removed bool `json:"removed,omitempty"`
}

func (n realNode) ip() string      { return fmt.Sprintf("10.89.0.%d", 10+n.Index) }
func (n realNode) podCIDR() string { return fmt.Sprintf("10.90.%d.0/24", n.Index) }
func (n realNode) netns() string   { return fmt.Sprintf("ippool-node%d", n.Index) }
func (n realNode) veth() string    { return fmt.Sprintf("ippool-v%d", n.Index) }

func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

func kubeletName(node string) string    { return "kubelet/" + node }
func containerdName(node string) string { return "containerd/" + node }
func kubeProxyName(node string) string  { return "kube-proxy/" + node }

// realNodeDir holds a node's configuration, containerd's root and the
// kubelet's root.
func (c *cluster) realNodeDir(node string, parts ...string) string {
	return c.path(append([]string{"real", node}, parts...)...)
}

// checkRealPrerequisites fails early, saying what to install or build.
func (c *cluster) checkRealPrerequisites() error {
	if os.Geteuid() != 0 {
		return errors.New("real nodes need root: they create network namespaces and run containerd")
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "nsenter", "iptables", "conntrack"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run 'make node-packages' (Debian: containerd, runc, containernetworking-plugins, iptables, conntrack, iproute2)", tool)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return errors.New("/usr/lib/cni/bridge not found: run 'make node-packages' (Debian: containernetworking-plugins)")
	}
	for _, name := range []string{"kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(c.Assets, name)); err != nil {
			return fmt.Errorf("%s not found: run 'make node-assets'", filepath.Join(c.Assets, name))
		}
	}
	for _, name := range realImages {
		if _, err := os.Stat(filepath.Join(c.Real.Images, name)); err != nil {
			return fmt.Errorf("%s not found: run 'make images-local'", filepath.Join(c.Real.Images, name))
		}
	}
	return nil
}

// runCmd runs a command and returns its error with its output.
func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupHost creates the bridge, the directory of the simulated networks
// and, if the host has none, the D-Bus socket path. Another cluster with
// real nodes on this machine is refused: they would share the bridge.
func (c *cluster) setupHost() error {
	if _, err := net.InterfaceByName(realBridge); err == nil {
		return fmt.Errorf("bridge %s exists: a local cluster with real nodes runs on this machine; run 'localcluster down' in its directory first (or 'ip link del %s')", realBridge, realBridge)
	}
	c.removeStaleNetns()
	for _, args := range [][]string{
		{"link", "add", realBridge, "type", "bridge"},
		{"addr", "add", realHostIP + "/24", "dev", realBridge},
		{"link", "set", realBridge, "up"},
	} {
		if err := runCmd("ip", args...); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	// A new cluster's nodes are new machines: no simulated network yet.
	if err := os.RemoveAll(simStateHostDir); err != nil {
		return err
	}
	if err := os.MkdirAll(simStateHostDir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(dbusSocket); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dbusSocket), 0o755); err != nil {
			return err
		}
		// Binding makes the socket file; closing without unlinking keeps it.
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dbusSocket, Net: "unix"})
		if err != nil {
			return fmt.Errorf("create %s: %w", dbusSocket, err)
		}
		l.SetUnlinkOnClose(false)
		_ = l.Close()
		c.Real.DBusSocket = true
	}
	return nil
}

// removeStaleNetns deletes the node namespaces and veths a cluster that
// was not taken down left behind.
func (c *cluster) removeStaleNetns() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "ippool-node") {
			_ = runCmd("ip", "netns", "del", e.Name())
		}
	}
	links, _ := net.Interfaces()
	for _, l := range links {
		if strings.HasPrefix(l.Name, "ippool-v") {
			_ = runCmd("ip", "link", "del", l.Name)
		}
	}
}

// teardownHost removes what setupHost created.
func (c *cluster) teardownHost() error {
	var errs []error
	if _, err := net.InterfaceByName(realBridge); err == nil {
		errs = append(errs, runCmd("ip", "link", "del", realBridge))
	}
	if c.Real.DBusSocket {
		if err := os.Remove(dbusSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		c.Real.DBusSocket = false
	}
	return errors.Join(errs...)
}

// startKubeControllers starts kube-controller-manager (garbage collector,
// DaemonSet, Deployment, ReplicaSet, service account and endpoint
// controllers, among others) and kube-scheduler. Node IPAM is off: each
// node's pod range is in its CNI configuration. The node lifecycle
// controller runs: it lifts the not-ready taint a new Node is created
// with.
func (c *cluster) startKubeControllers(ctx context.Context) error {
	keys := pki{dir: c.path("pki")}
	for _, s := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			"--service-account-private-key-file=" + keys.path("sa.key"), "--root-ca-file=" + keys.path("ca.crt"),
			"--controllers=*,-nodeipam", "--use-service-account-credentials=false",
			"--cluster-cidr=" + realPodRange, "--authentication-skip-lookup",
		}},
		{"kube-scheduler", nil},
	} {
		port, err := freePort()
		if err != nil {
			return err
		}
		p := &process{Binary: filepath.Join(c.Assets, s.name), Log: c.path("logs", s.name+".log"),
			Health: fmt.Sprintf("https://%s/healthz", hostPort(port)),
			Args: append([]string{"--kubeconfig=" + c.kubeconfig(), "--leader-elect=false",
				"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port)}, s.args...)}
		if err := c.launch(s.name, p); err != nil {
			return err
		}
		if err := p.ready(ctx, time.Minute, insecureReady(p.Health)); err != nil {
			return err
		}
	}
	return nil
}

// addRealNode creates a node's namespace and starts its containerd (with
// the images imported), its kubelet, waiting until the Node is Ready, and
// its kube-proxy (which looks up its Node when it starts), and labels it: a worker, and the cluster's first node also a
// control-plane node, where the pool controller's pods run.
func (c *cluster) addRealNode(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("node name %q: %s", name, strings.Join(errs, "; "))
	}
	if n, ok := c.Real.Nodes[name]; ok && !n.Removed {
		return fmt.Errorf("node %s already runs", name)
	}
	node := &realNode{Index: c.nextRealIndex()}
	if node.Index > maxRealNodes {
		return fmt.Errorf("no more than %d real nodes", maxRealNodes)
	}
	controlPlane := len(c.Real.Nodes) == 0
	c.Real.Nodes[name] = node
	if err := c.save(); err != nil {
		return err
	}
	// A node added again under a removed one's name is a new machine.
	if err := unmountUnder(c.realNodeDir(name)); err != nil {
		return err
	}
	for _, dir := range []string{c.realNodeDir(name), filepath.Join(simStateHostDir, name+".yaml")} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		name string
		run  func() error
	}{
		{"network", func() error { return c.nodeNetwork(name, *node) }},
		{"containerd", func() error { return c.startContainerd(ctx, name, *node) }},
		{"images", func() error { return c.importImages(name) }},
		{"kubelet", func() error { return c.startKubelet(ctx, k, name, *node) }},
		{"kube-proxy", func() error { return c.startKubeProxy(ctx, name, *node) }},
	} {
		if err := step(out, name+" "+s.name, s.run); err != nil {
			return err
		}
	}
	all := map[string]string{"node-role.kubernetes.io/worker": ""}
	if controlPlane {
		all["node-role.kubernetes.io/control-plane"] = ""
	}
	maps.Copy(all, labels)
	return labelNode(ctx, k, name, all)
}

// nextRealIndex is one more than the highest index used, removed nodes'
// included: a new node never takes an old one's addresses.
func (c *cluster) nextRealIndex() int {
	highest := 0
	for _, n := range c.Real.Nodes {
		highest = max(highest, n.Index)
	}
	return highest + 1
}

// nodeNetwork creates the node's namespace, with eth0 on the bridge and a
// default route through the host, and routes its pods from the host.
func (c *cluster) nodeNetwork(name string, n realNode) error {
	ns := n.netns()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", n.veth(), "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", n.veth(), "master", realBridge, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", n.ip() + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", realHostIP},
		{"route", "add", n.podCIDR(), "via", n.ip()},
	} {
		if err := runCmd("ip", args...); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return runCmd("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
}

func (c *cluster) containerdSocket(node string) string {
	return c.realNodeDir(node, "containerd.sock")
}

// startContainerd writes the node's containerd and CNI configuration and
// starts containerd in the node's namespace.
func (c *cluster) startContainerd(ctx context.Context, name string, n realNode) error {
	dir := c.realNodeDir(name)
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
`, filepath.Join(dir, "containerd-root"), filepath.Join(dir, "containerd-state"), c.containerdSocket(name),
		sandboxImage, filepath.Join(dir, "cni"))
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "ippool-pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, filepath.Join(dir, "cni-ipam"), n.podCIDR())
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
	p := &process{Binary: bin, NetNS: n.netns(), Log: c.path("logs", "containerd-"+name+".log"),
		Args: []string{"--config", filepath.Join(dir, "containerd.toml")}}
	if err := c.launch(containerdName(name), p); err != nil {
		return err
	}
	return p.ready(ctx, time.Minute, func(context.Context) error { return c.ctr(name, "version") })
}

// ctr runs ctr against a node's containerd, in the namespace of the
// kubelet's containers.
func (c *cluster) ctr(node string, args ...string) error {
	return runCmd("ctr", append([]string{"--address", c.containerdSocket(node), "--namespace", "k8s.io"}, args...)...)
}

// importImages imports the image tarballs of make images-local: nothing is
// pulled.
func (c *cluster) importImages(node string) error {
	for _, name := range realImages {
		if err := c.ctr(node, "images", "import", filepath.Join(c.Real.Images, name)); err != nil {
			return err
		}
	}
	return nil
}

// nodeKubeconfig writes the kubeconfig of a node's components: the admin
// credentials, with the API server at its address on the bridge.
func (c *cluster) nodeKubeconfig(name string) (string, error) {
	path := c.realNodeDir(name, "kubeconfig")
	_, port, err := net.SplitHostPort(strings.TrimPrefix(c.APIServer, "https://"))
	if err != nil {
		return "", err
	}
	return path, pki{dir: c.path("pki")}.writeKubeconfig(path, "https://"+net.JoinHostPort(realHostIP, port))
}

// startKubeProxy starts the node's kube-proxy (iptables mode), which makes
// the Services, the API server's among them, reachable from the node and
// its pods.
func (c *cluster) startKubeProxy(ctx context.Context, name string, n realNode) error {
	kubeconfig, err := c.nodeKubeconfig(name)
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
`, kubeconfig, name, n.ip(), n.ip()+":10256", realPodRange)
	path := c.realNodeDir(name, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	p := &process{Binary: filepath.Join(c.Assets, "kube-proxy"), NetNS: n.netns(), Log: c.path("logs", "kube-proxy-"+name+".log"),
		Health: "http://" + n.ip() + ":10256/livez", Args: []string{"--config=" + path}}
	if err := c.launch(kubeProxyName(name), p); err != nil {
		return err
	}
	// kube-proxy's health endpoint answers once it runs; it is healthy
	// only after its first sync, which needs the Node.
	return p.ready(ctx, time.Minute, answers(p.Health))
}

// startKubelet starts the node's kubelet and waits until its Node is
// Ready. The configuration fits this machine: cgroup v1 with the cgroupfs
// driver and no QoS cgroups, no swap check and no eviction (several
// kubelets share the host's disk and memory), and no image garbage
// collection (the images cannot be pulled again).
func (c *cluster) startKubelet(ctx context.Context, k client.Client, name string, n realNode) error {
	kubeconfig, err := c.nodeKubeconfig(name)
	if err != nil {
		return err
	}
	root := c.realNodeDir(name, "kubelet")
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
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
`, pki{dir: c.path("pki")}.path("ca.crt"), n.ip(), n.ip(), "unix://"+c.containerdSocket(name), filepath.Join(root, "pod-logs"))
	path := c.realNodeDir(name, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	p := &process{Binary: filepath.Join(c.Assets, "kubelet"), NetNS: n.netns(), Log: c.path("logs", "kubelet-"+name+".log"),
		Args: []string{"--config=" + path, "--kubeconfig=" + kubeconfig, "--hostname-override=" + name,
			"--node-ip=" + n.ip(), "--root-dir=" + root, "--cert-dir=" + filepath.Join(root, "pki"), "--v=1"}}
	if err := c.launch(kubeletName(name), p); err != nil {
		return err
	}
	return p.ready(ctx, 2*time.Minute, func(ctx context.Context) error { return nodeReady(ctx, k, name) })
}

// nodeReady fails until the Node is Ready.
func nodeReady(ctx context.Context, k client.Client, name string) error {
	var node corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready", name)
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

// removeRealNode deletes a node. Gracefully, the Node goes first while
// its kubelet and pods run: the garbage collector deletes its enactments
// and the handler pod releases their addresses; once they are gone the
// node is stopped. With crash, the node is stopped first, as a machine
// that dies, and the pool controller frees its addresses.
func (c *cluster) removeRealNode(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	n := c.Real.Nodes[name]
	if n.Removed {
		return fmt.Errorf("node %s was removed already", name)
	}
	n.Removed = true
	if crash {
		if err := c.stopRealNode(name, n); err != nil {
			return err
		}
		fmt.Fprintf(out, "stopped node %s: its kubelet, containers and network\n", name)
	}
	if err := k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	fmt.Fprintf(out, "deleted node %s\n", name)
	gone := waitFor(3*time.Minute, func() bool { return enactmentsOf(ctx, k, name) == 0 })
	if !crash {
		if err := c.stopRealNode(name, n); err != nil {
			return err
		}
		fmt.Fprintf(out, "stopped node %s: its kubelet, containers and network\n", name)
	}
	if !gone {
		return fmt.Errorf("the enactments of node %s are still there after three minutes; see the pool controller's pods' logs", name)
	}
	fmt.Fprintf(out, "the enactments of %s are gone and its addresses released\n", name)
	return nil
}

// stopRealNode stops a node's kubelet, kills its containers, stops its
// containerd and kube-proxy, unmounts what they mounted and deletes its
// namespace. What cannot be stopped is reported; the rest still goes.
func (c *cluster) stopRealNode(name string, n *realNode) error {
	var errs []error
	stop := func(proc string) {
		if p := c.Processes[proc]; p != nil {
			if err := p.stop(syscall.SIGTERM, 15*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", proc, err))
			}
		}
	}
	stop(kubeletName(name))
	if c.Processes[containerdName(name)].alive() {
		c.killContainers(name)
	}
	stop(kubeProxyName(name))
	stop(containerdName(name))
	killShims(c.containerdSocket(name))
	errs = append(errs, unmountUnder(c.realNodeDir(name)))
	// Deleting the host's end of the veth deletes both ends, even if the
	// kernel keeps the namespace a while after it is deleted.
	if _, err := net.InterfaceByName(n.veth()); err == nil {
		errs = append(errs, runCmd("ip", "link", "del", n.veth()))
	}
	if _, err := os.Stat(netnsPath(n.netns())); err == nil {
		errs = append(errs, runCmd("ip", "netns", "del", n.netns()))
	}
	return errors.Join(errs...)
}

// killContainers kills every container of a node's containerd and deletes
// its task, so that no pod outlives its node, and removes the network
// namespaces of its pod sandboxes, which containerd would have removed on
// a sandbox's stop.
func (c *cluster) killContainers(node string) {
	out, err := exec.Command("ctr", "--address", c.containerdSocket(node), "--namespace", "k8s.io", "tasks", "ls", "-q").Output()
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	var sandboxNetns []string
	for _, id := range ids {
		sandboxNetns = append(sandboxNetns, c.podNetns(node, id)...)
		_ = c.ctr(node, "tasks", "kill", "--all", "--signal", "SIGKILL", id)
	}
	for _, id := range ids {
		waitFor(5*time.Second, func() bool { return c.ctr(node, "tasks", "delete", id) == nil })
	}
	for _, ns := range sandboxNetns {
		if err := syscall.Unmount(ns, syscall.MNT_DETACH); err == nil {
			_ = os.Remove(ns)
		}
	}
}

// podNetns returns the network namespace a container joins if it is a
// file of /run/netns: a pod sandbox's.
func (c *cluster) podNetns(node, id string) []string {
	out, err := exec.Command("ctr", "--address", c.containerdSocket(node), "--namespace", "k8s.io", "containers", "info", id).Output()
	if err != nil {
		return nil
	}
	var info struct {
		Spec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"Spec"`
	}
	if json.Unmarshal(out, &info) != nil {
		return nil
	}
	var paths []string
	for _, ns := range info.Spec.Linux.Namespaces {
		if ns.Type == "network" && (strings.HasPrefix(ns.Path, "/run/netns/") || strings.HasPrefix(ns.Path, "/var/run/netns/")) {
			paths = append(paths, ns.Path)
		}
	}
	return paths
}

// killShims kills the containerd shims of a containerd socket: they
// outlive containerd.
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") || !slices.Contains(args, socket) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(f, "/proc/%d/cmdline", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder unmounts every mount below dir, deepest first: the
// kubelet's volumes and containerd's root filesystems.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var mounts []string
	scan := bufio.NewScanner(f)
	scan.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for scan.Scan() {
		fields := strings.Fields(scan.Text())
		if len(fields) < 5 {
			continue
		}
		point := strings.ReplaceAll(fields[4], `\040`, " ")
		if point == dir || strings.HasPrefix(point, dir+"/") {
			mounts = append(mounts, point)
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// downReal stops every real node and removes the host's bridge. It
// returns the nodes that ran.
func (c *cluster) downReal() ([]string, error) {
	var errs []error
	var stopped []string
	for _, name := range slices.Sorted(maps.Keys(c.Real.Nodes)) {
		if c.Processes[kubeletName(name)].alive() || c.Processes[containerdName(name)].alive() {
			stopped = append(stopped, name)
		}
		errs = append(errs, c.stopRealNode(name, c.Real.Nodes[name]))
	}
	return stopped, errors.Join(errors.Join(errs...), c.teardownHost())
}

// realNode runs a node command on a cluster of real nodes. Restart, stall
// and resume drive a handler process, and a real node's handler is a pod:
// they are refused, saying what to do instead.
func (c *cluster) realNode(ctx context.Context, k client.Client, verb, name string, labels map[string]string,
	kubelet, crash bool, out io.Writer) error {
	switch {
	case verb == "add" && !kubelet:
		return fmt.Errorf("this cluster's nodes are real: add node %s with --kubelet", name)
	case verb == "add":
		start := time.Now()
		if err := c.addRealNode(ctx, k, name, labels, out); err != nil {
			return err
		}
		fmt.Fprintf(out, "added node %s in %.0fs; the handler DaemonSet runs a pod on it\n", name, time.Since(start).Seconds())
		return nil
	}
	if _, ok := c.Real.Nodes[name]; !ok {
		return fmt.Errorf("node %s was not added by this local cluster", name)
	}
	if verb == "remove" {
		return c.removeRealNode(ctx, k, name, crash, out)
	}
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s was removed", name)
	}
	return fmt.Errorf("node %s: %s drives a handler process, and a real node's handler is a pod: delete the pod (kubectl -n nmstate-ippool delete pod -l app.kubernetes.io/component=handler --field-selector spec.nodeName=%s)", name, verb, name)
}

package nodes

import (
	"context"
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
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

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
	for _, name := range state.RealImages {
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
	if _, err := net.InterfaceByName(state.RealBridge); err == nil {
		return fmt.Errorf("bridge %s exists: a local cluster with real nodes runs on this machine; run 'localcluster down' in its directory first (or 'ip link del %s')", state.RealBridge, state.RealBridge)
	}
	c.removeStaleNetns()
	for _, args := range [][]string{
		{"link", "add", state.RealBridge, "type", "bridge"},
		{"addr", "add", state.RealHostIP + "/24", "dev", state.RealBridge},
		{"link", "set", state.RealBridge, "up"},
	} {
		if err := runCmd("ip", args...); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	// A new cluster's nodes are new machines: no simulated network yet.
	if err := os.RemoveAll(state.SimStateHostDir); err != nil {
		return err
	}
	if err := os.MkdirAll(state.SimStateHostDir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(state.DBusSocketPath); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(state.DBusSocketPath), 0o755); err != nil {
			return err
		}
		// Binding makes the socket file; closing without unlinking keeps it.
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: state.DBusSocketPath, Net: "unix"})
		if err != nil {
			return fmt.Errorf("create %s: %w", state.DBusSocketPath, err)
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
	if _, err := net.InterfaceByName(state.RealBridge); err == nil {
		errs = append(errs, runCmd("ip", "link", "del", state.RealBridge))
	}
	if c.Real.DBusSocket {
		if err := os.Remove(state.DBusSocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		c.Real.DBusSocket = false
	}
	return errors.Join(errs...)
}

// addRealNode creates a node's namespace and starts its containerd (which
// pulls from the cluster's registry), its kubelet, waiting until the Node is Ready, and
// its kube-proxy (which looks up its Node when it starts), and labels it: a worker, and the cluster's first node also a
// control-plane node, where the pool controller's pods run.
func (c *cluster) addRealNode(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("node name %q: %s", name, strings.Join(errs, "; "))
	}
	if n, ok := c.Real.Nodes[name]; ok && !n.Removed {
		return fmt.Errorf("node %s already runs", name)
	}
	node := &state.RealNode{Index: c.nextRealIndex()}
	if node.Index > state.MaxRealNodes {
		return fmt.Errorf("no more than %d real nodes", state.MaxRealNodes)
	}
	controlPlane := len(c.Real.Nodes) == 0
	c.Real.Nodes[name] = node
	if err := c.Save(); err != nil {
		return err
	}
	// A node added again under a removed one's name is a new machine.
	if err := UnmountUnder(c.RealNodeDir(name)); err != nil {
		return err
	}
	for _, dir := range []string{c.RealNodeDir(name), filepath.Join(state.SimStateHostDir, name+".yaml")} {
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
		{"kubelet", func() error { return c.startKubelet(ctx, k, name, *node) }},
		{"kube-proxy", func() error { return c.startKubeProxy(ctx, name, *node) }},
	} {
		if err := state.Step(out, name+" "+s.name, s.run); err != nil {
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
func (c *cluster) nodeNetwork(name string, n state.RealNode) error {
	ns := n.Netns()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", n.Veth(), "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", n.Veth(), "master", state.RealBridge, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", n.IP() + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", state.RealHostIP},
		{"route", "add", n.PodCIDR(), "via", n.IP()},
	} {
		if err := runCmd("ip", args...); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return runCmd("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
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
	if err := deleteNode(ctx, k, name, crash, out); err != nil {
		return err
	}
	gone := process.WaitFor(3*time.Minute, func() bool { return enactmentsOf(ctx, k, name) == 0 })
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
func (c *cluster) stopRealNode(name string, n *state.RealNode) error {
	var errs []error
	stop := func(proc string) {
		if p := c.Processes[proc]; p != nil {
			if err := p.Stop(syscall.SIGTERM, 15*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", proc, err))
			}
		}
	}
	stop(state.KubeletName(name))
	if c.Processes[state.ContainerdName(name)].Alive() {
		c.killContainers(name)
	}
	stop(state.KubeProxyName(name))
	stop(state.ContainerdName(name))
	killShims(c.containerdSocket(name))
	errs = append(errs, UnmountUnder(c.RealNodeDir(name)))
	// Deleting the host's end of the veth deletes both ends, even if the
	// kernel keeps the namespace a while after it is deleted.
	if _, err := net.InterfaceByName(n.Veth()); err == nil {
		errs = append(errs, runCmd("ip", "link", "del", n.Veth()))
	}
	if _, err := os.Stat(process.NetnsPath(n.Netns())); err == nil {
		errs = append(errs, runCmd("ip", "netns", "del", n.Netns()))
	}
	return errors.Join(errs...)
}

// downReal stops every real node and removes the host's bridge. It
// returns the nodes that ran.
func (c *cluster) downReal() ([]string, error) {
	var errs []error
	var stopped []string
	for _, name := range slices.Sorted(maps.Keys(c.Real.Nodes)) {
		if c.Processes[state.KubeletName(name)].Alive() || c.Processes[state.ContainerdName(name)].Alive() {
			stopped = append(stopped, name)
		}
		errs = append(errs, c.stopRealNode(name, c.Real.Nodes[name]))
	}
	return stopped, errors.Join(errors.Join(errs...), c.teardownHost())
}

// added fails for a node this cluster did not add.
func (c *cluster) added(name string) error {
	if _, ok := c.Real.Nodes[name]; !ok {
		return fmt.Errorf("node %s was not added by this local cluster", name)
	}
	return nil
}

// handlerIsAPod refuses verb, a command that drives a handler process, on
// a real node, whose handler is a pod, and says what to do instead.
func (c *cluster) handlerIsAPod(ctx context.Context, k client.Client, name, verb string) error {
	if err := c.added(name); err != nil {
		return err
	}
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s was removed", name)
	}
	return fmt.Errorf("node %s: %s drives a handler process, and a real node's handler is a pod: delete the pod (kubectl -n nmstate-ippool delete pod -l app.kubernetes.io/component=handler --field-selector spec.nodeName=%s)", name, verb, name)
}

package state

import (
	"fmt"
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
	// RealBridge joins the nodes' namespaces; RealHostIP, its address, is
	// where they reach the API server.
	RealBridge = "ippool-br0"
	RealHostIP = "10.89.0.1"
	// RealPodRange holds each node's pod range, 10.90.<index>.0/24.
	RealPodRange = "10.90.0.0/16"
	// SimStateHostDir is where the handler pods of deploy/local keep each
	// node's simulated network (a hostPath there).
	SimStateHostDir = "/var/lib/nmstate-ippool-local"
	// DBusSocketPath is the host path the handler DaemonSet mounts, as a
	// socket. The nodes have no NetworkManager; the path must only exist.
	DBusSocketPath = "/run/dbus/system_bus_socket"
	// SandboxImage is the pause image of make images-local, which the
	// nodes' containerd runs pod sandboxes with.
	SandboxImage = "registry.k8s.io/pause:3.10"
	// MaxRealNodes bounds the node index: it is an octet of the addresses.
	MaxRealNodes = 200
)

// RealImages are the image tarballs make images-local writes.
var RealImages = []string{"pause.tar", "handler.tar", "pool-controller.tar", RegistryTool}

// RegistryTool is the command (hack/images) that serves the images to the
// nodes from a registry on the host, RegistryName its process, on
// RealRegistryPort.
const (
	RegistryTool     = "images"
	RegistryName     = "registry"
	RealRegistryPort = "5000"
)

// RealCluster is the state of a cluster with real nodes.
type RealCluster struct {
	// Images is the directory of the image tarballs.
	Images string `json:"images"`
	// Nodes by name; a removed node stays, marked.
	Nodes map[string]*RealNode `json:"nodes"`
	// DBusSocket is set if localcluster created the socket file at
	// DBusSocketPath, and removes it on down.
	DBusSocket bool `json:"dbusSocket,omitempty"`
}

// RealNode is one kubelet's node.
type RealNode struct {
	// Index numbers the node's addresses: 10.89.0.<10+index> on the bridge
	// and the pod range 10.90.<index>.0/24.
	Index   int  `json:"index"`
	Removed bool `json:"removed,omitempty"`
}

// IP is the node's address on the bridge.
func (n RealNode) IP() string { return fmt.Sprintf("10.89.0.%d", 10+n.Index) }

// PodCIDR is the node's pod range.
func (n RealNode) PodCIDR() string { return fmt.Sprintf("10.90.%d.0/24", n.Index) }

// Netns is the node's network namespace.
func (n RealNode) Netns() string { return fmt.Sprintf("ippool-node%d", n.Index) }

// Veth is the host end of the node's link to the bridge.
func (n RealNode) Veth() string { return fmt.Sprintf("ippool-v%d", n.Index) }

// KubeletName is the name of a real node's kubelet process.
func KubeletName(node string) string { return "kubelet/" + node }

// ContainerdName is the name of a real node's containerd process.
func ContainerdName(node string) string { return "containerd/" + node }

// KubeProxyName is the name of a real node's kube-proxy process.
func KubeProxyName(node string) string { return "kube-proxy/" + node }

// RealNodeDir holds a node's configuration, containerd's root and the
// kubelet's root.
func (c *Cluster) RealNodeDir(node string, parts ...string) string {
	return c.Path(append([]string{"real", node}, parts...)...)
}

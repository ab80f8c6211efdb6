// Package nodes runs the local cluster's nodes: simulated ones (a Node,
// marked Ready and kept so by heartbeats, a simulated network and a
// handler process) or real ones (a network namespace on a bridge, with a
// containerd, a kubelet and a kube-proxy each).
package nodes

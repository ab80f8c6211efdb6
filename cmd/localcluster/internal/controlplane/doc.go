// Package controlplane runs the local cluster's control plane: etcd,
// kube-apiserver, the CRDs, and the Kubernetes controllers that run beside
// the nodes (for simulated nodes the garbage collector, the node lifecycle
// controller and the process that posts the nodes' heartbeats; for real
// nodes kube-controller-manager and kube-scheduler), and for real nodes
// the image registry they pull from.
package controlplane

// Package envtest starts the real kube-apiserver and etcd that the
// controller and API tests run against, with the project's CRDs installed.
//
// The binaries come from KUBEBUILDER_ASSETS or, when it is unset, from the
// repository's bin/k8s, where `make envtest-assets` builds them from source.
// A missing binary is an error that says which command builds it: tests
// never skip silently.
package envtest

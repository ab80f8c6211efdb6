// Package v1 holds the nmstate.io/v1 NodeIPPool API of nmstate-ippool and the
// record that a NodeNetworkConfigurationEnactment keeps of the addresses its
// node holds (status.ippool).
//
// The package depends on k8s.io/apimachinery and kubernetes-nmstate's
// api/shared (the NNCP spec a pooled policy carries) only, so clients can
// import it without pulling in controller-runtime.
//
// Admission validation lives in the CRD (CEL rules generated from the
// kubebuilder markers below, and by hack/range-order for the rules that
// order start and end); the same rules are implemented in Go by
// pkg/ippool.NewRange, which controllers use as the last word.
//
// +kubebuilder:object:generate=true
// +groupName=nmstate.io
package v1

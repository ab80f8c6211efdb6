// Package v1beta1 holds this project's NodeNetworkConfigurationEnactment
// (NNCE), nmstate.io/v1beta1: the kubernetes-nmstate enactment, field for
// field, plus status.ippool, the durable record of the addresses a node holds
// for a policy. Clients of kubernetes-nmstate see the same object; its CRD
// preserves unknown fields, as upstream's does.
//
// +kubebuilder:object:generate=true
// +groupName=nmstate.io
package v1beta1

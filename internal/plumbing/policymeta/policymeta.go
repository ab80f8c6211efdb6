// Package policymeta reads NodeNetworkConfigurationPolicies as metadata
// only (name, UID, generation, labels, annotations, owners, finalizers):
// what a controller beside kubernetes-nmstate's handler needs of them to
// react, without their status, which every one of that handler's
// processes rewrites each time it reconciles a policy (a watch of the
// whole objects decodes N writes of each of N policies on N nodes). It is
// the one place that builds such reads; the spec, when needed, is read
// from the API server.
package policymeta

import (
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Object returns an empty policy metadata object named name: the type to
// read into, and to watch.
func Object(name string) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(nmstatev1.GroupVersion.WithKind("NodeNetworkConfigurationPolicy"))
	p.Name = name
	return p
}

// List returns an empty list of policy metadata to read into.
func List() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(nmstatev1.GroupVersion.WithKind("NodeNetworkConfigurationPolicyList"))
	return l
}

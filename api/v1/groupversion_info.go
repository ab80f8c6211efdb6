package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of the NodeIPPool kind.
	GroupVersion = schema.GroupVersion{Group: "nmstate.io", Version: "v1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &NodeIPPool{}, &NodeIPPoolList{},
		&PooledNodeNetworkConfigurationPolicy{}, &PooledNodeNetworkConfigurationPolicyList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

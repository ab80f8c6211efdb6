package v1beta1

import (
	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNetworkState is the network state of one node, named after it and
// owned by it: kubernetes-nmstate's NNS, with the same schema. The handler
// of the node writes it when the state changes. It is defined here, not
// taken from kubernetes-nmstate's v1beta1 package, because that package
// also registers an enactment type under the GroupVersionKind this
// project's enactment uses.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=nodenetworkstates,shortName=nns,scope=Cluster
// +kubebuilder:printcolumn:name="Updated",type="date",JSONPath=".status.lastSuccessfulUpdateTime"
// +kubebuilder:storageversion
type NodeNetworkState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status shared.NodeNetworkStateStatus `json:"status,omitempty"`
}

// NodeNetworkStateList is a list of NodeNetworkStates.
//
// +kubebuilder:object:root=true
type NodeNetworkStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeNetworkState `json:"items"`
}

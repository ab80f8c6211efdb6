package v1beta1

import (
	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// NodeNetworkConfigurationEnactment is the state of one policy on one node,
// named "<node>.<policy>" and labelled with both (shared.EnactmentNodeLabel,
// shared.EnactmentPolicyLabel). Its owner is the Node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=nodenetworkconfigurationenactments,shortName=nnce,scope=Cluster
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.conditions[?(@.status==\"True\")].type",description="Status"
// +kubebuilder:printcolumn:name="Status Age",type="date",JSONPath=".status.conditions[?(@.status==\"True\")].lastTransitionTime",description="Status Age"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.status==\"True\")].reason",description="Reason"
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:storageversion
type NodeNetworkConfigurationEnactment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status NodeNetworkConfigurationEnactmentStatus `json:"status,omitempty"`
}

// NodeNetworkConfigurationEnactmentStatus is kubernetes-nmstate's enactment
// status plus the IP pool record.
type NodeNetworkConfigurationEnactmentStatus struct {
	shared.NodeNetworkConfigurationEnactmentStatus `json:",inline"`

	// IPPool records the addresses this enactment holds, by pool. With
	// capturedStates it is the source of truth a NodeIPPool is rebuilt from.
	// +optional
	IPPool ippoolv1.EnactmentIPPools `json:"ippool,omitempty"`

	// WaitingForIPPool names the pool this enactment waits on for want of a
	// free address (its Failing reason is IPPoolExhausted); empty otherwise.
	// The pool controller reads it to report who waits on an exhausted pool.
	// +optional
	WaitingForIPPool string `json:"waitingForIPPool,omitempty"`

	// Slot is this node's turn to apply the policy under its
	// maxUnavailable: the handler asks for it once the state to apply is
	// recorded, the policy controller grants it, and the handler gives it
	// back with the outcome of the apply. Absent while no apply waits.
	// +optional
	Slot *ApplySlot `json:"slot,omitempty"`
}

// ApplySlot is a request for one of a policy's maxUnavailable slots and,
// once granted, the slot itself.
type ApplySlot struct {
	// Requested is when the handler asked to apply. A new request replaces
	// an old one and its grant.
	Requested metav1.MicroTime `json:"requested"`
	// Granted is when the policy controller granted the request. A grant
	// older than the controller's slot timeout no longer counts against
	// maxUnavailable (a handler that died while applying).
	// +optional
	Granted *metav1.MicroTime `json:"granted,omitempty"`
}

// NodeNetworkConfigurationEnactmentList is a list of enactments.
//
// +kubebuilder:object:root=true
type NodeNetworkConfigurationEnactmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeNetworkConfigurationEnactment `json:"items"`
}

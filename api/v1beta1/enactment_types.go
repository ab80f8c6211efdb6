package v1beta1

import (
	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// NodeNetworkConfigurationEnactment is the state of one policy on one node,
// named "<node>.<policy>" and labelled with both (nmstate.io/node,
// nmstate.io/policy). Its owner is the Node.
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

	// RetryCount is what kubernetes-nmstate's handler counts its failed
	// attempts in, by policy generation. This project's handler keeps its
	// count in failures and never writes this field; the schema carries it
	// so that an enactment written by upstream's handler (before a switch
	// to ours, or after a switch back) loses nothing.
	// +optional
	RetryCount map[string]int `json:"retryCount,omitempty"`

	// WaitingForIPPool names the pool this enactment waits on for want of a
	// free address (its Failing reason is IPPoolExhausted); empty otherwise.
	// The pool controller reads it to report who waits on an exhausted pool.
	// +optional
	WaitingForIPPool string `json:"waitingForIPPool,omitempty"`

	// Slot is this node's turn to apply the policy under its
	// maxUnavailable: the handler asks for it once the state to apply is
	// recorded, the policy controller answers (granted, queued or
	// aborted), and the handler gives it back with the outcome of the
	// apply. The handler writes the request and the conditions, the
	// policy controller only its answer. Absent while no apply waits.
	// +optional
	Slot *ApplySlot `json:"slot,omitempty"`

	// Failures counts this node's failed attempts to configure policy
	// generation policyGeneration: the state could not be rendered or
	// applied, or a probe failed after the apply and it was rolled back.
	// The handler tries again after a backoff (Failing / Retrying
	// "Retrying n/m") until its retries are spent, then stays Failing /
	// FailedToConfigure until the policy changes. A new generation starts
	// the count again. Kept in the status, so a restarted handler goes on
	// counting.
	// +optional
	Failures *ConfigureFailures `json:"failures,omitempty"`
}

// ConfigureFailures is the count of failed attempts of one policy
// generation on one node.
type ConfigureFailures struct {
	// Count is how many attempts failed.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
	// Last is when the last attempt failed; the next one is due a backoff
	// later.
	Last metav1.Time `json:"last"`
}

// ApplySlot is a request for one of a policy's maxUnavailable slots and,
// once granted, the slot itself.
type ApplySlot struct {
	// Requested is when the handler asked to apply. A new request replaces
	// an old one and its answer. Absent from a slot that answers a new
	// enactment's request (the nmstate.io/ippool-request annotation, which
	// asks to apply once the pool controller has served it, or
	// nmstate.io/slot-request for a policy without ippool captures), until
	// its handler takes over a request that waits in the queue, was
	// granted for an earlier generation, or went unanswered: then it is
	// the enactment's creation, its place in the queue.
	// +optional
	Requested metav1.MicroTime `json:"requested,omitzero"`
	// Granted is when the policy controller granted the request. A grant
	// older than the controller's slot timeout no longer counts against
	// maxUnavailable (a handler that died while applying).
	// +optional
	Granted *metav1.MicroTime `json:"granted,omitempty"`
	// PolicyGeneration is the generation of the policy the policy
	// controller granted the request for: the one the handler's request
	// was written for (status.policyGeneration), or, for a new
	// enactment's request, which names none, the policy's. The handler
	// applies only that generation on the grant, and asks again when the
	// policy changed since (or the grant of a new enactment's request
	// names none, as a policy controller of an earlier version writes it).
	// +optional
	PolicyGeneration int64 `json:"policyGeneration,omitempty"`
	// Queued is when the policy controller found maxUnavailable nodes
	// already being configured: the request waits for a slot, and the
	// handler shows Pending / MaxUnavailableLimitReached. A grant clears it.
	// +optional
	Queued *metav1.MicroTime `json:"queued,omitempty"`
	// Aborted is the policy controller's refusal of the request: the
	// policy's generation failed on maxUnavailable nodes. The handler shows
	// it as Aborted / ConfigurationAborted, keeps its record and does not
	// ask again until the policy changes.
	// +optional
	Aborted *SlotAborted `json:"aborted,omitempty"`
}

// SlotAborted is why the policy controller refused a slot request.
type SlotAborted struct {
	// PolicyGeneration is the generation of the policy whose rollout was
	// aborted: a refusal of an earlier generation does not end a request
	// for a later one.
	PolicyGeneration int64 `json:"policyGeneration"`
	// Message says which nodes failed and what to do.
	Message string `json:"message"`
}

// NodeNetworkConfigurationEnactmentList is a list of enactments.
//
// +kubebuilder:object:root=true
type NodeNetworkConfigurationEnactmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeNetworkConfigurationEnactment `json:"items"`
}

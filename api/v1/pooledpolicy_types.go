package v1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PooledNodeNetworkConfigurationPolicy is a NodeNetworkConfigurationPolicy
// for clusters that keep kubernetes-nmstate's handler (companion mode): its
// spec is an NNCP's, ippool captures included, and the pool controller
// keeps one plain NNCP per selected node with each ippool capture written
// in as a literal (the node's address, the pool's gateway and DNS), which
// kubernetes-nmstate's handler applies. The rollout across those NNCPs is
// paced by spec.maxUnavailable, as one policy's would be.
//
// Status.Nodes is the durable record of the addresses each node holds;
// only the pool controller writes it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pnncp
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.conditions[?(@.status==\"True\")].type"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.status==\"True\")].reason"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=".status.selectedNodes"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a pooled policy's name must be 63 characters or less: it is the value of the nmstate.io/pooled-policy label of its NodeNetworkConfigurationPolicies"
type PooledNodeNetworkConfigurationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is a NodeNetworkConfigurationPolicy's spec. spec.capture is
	// immutable, as kubernetes-nmstate makes it.
	// +optional
	Spec shared.NodeNetworkConfigurationPolicySpec `json:"spec,omitempty"`
	// +optional
	Status PooledPolicyStatus `json:"status,omitempty"`
}

// PooledPolicyStatus is the observed state of a pooled policy: the
// conditions of an NNCP, in kubernetes-nmstate's words, summed up over its
// generated policies, and the record of every node's addresses.
type PooledPolicyStatus struct {
	// Conditions are Available, Degraded, Progressing and Ignored, with
	// kubernetes-nmstate's reasons and messages ("3/3 nodes successfully
	// configured").
	// +optional
	Conditions shared.ConditionList `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SelectedNodes counts the nodes the policy selects.
	// +optional
	SelectedNodes int `json:"selectedNodes,omitempty"`
	// Nodes are the nodes the policy holds addresses for or configures,
	// sorted by name: the record of their addresses.
	// +optional
	// +listType=map
	// +listMapKey=node
	Nodes []PooledPolicyNode `json:"nodes,omitempty"`
}

// PooledPolicyNode is one node of a pooled policy.
type PooledPolicyNode struct {
	// Node is the node's name.
	Node string `json:"node"`
	// NodeUID is the UID of the Node the addresses were taken for: a node
	// re-created under the same name is another machine.
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty"`
	// Policy is the NodeNetworkConfigurationPolicy generated for the node.
	Policy string `json:"policy"`
	// Addresses are the addresses the node holds, one per ippool capture.
	// +optional
	// +listType=map
	// +listMapKey=capture
	Addresses []PooledAddress `json:"addresses,omitempty"`
	// Released are addresses taken from the node by a reset: quarantined
	// already, and recorded until the node's generated policy without them
	// is applied.
	// +optional
	// +listType=map
	// +listMapKey=ip
	Released []PooledAddress `json:"released,omitempty"`
	// Generated is set once a policy with the node's addresses was written
	// for it: until then no handler can have put them on its interfaces,
	// and a release needs no confirmation.
	// +optional
	Generated bool `json:"generated,omitempty"`
	// Releasing is set while the node's addresses are being removed from
	// its interfaces (the node is no longer selected, or the pooled policy
	// is being deleted): they are quarantined already, and the generated
	// policy removes them; the record goes once kubernetes-nmstate's
	// handler has applied that.
	// +optional
	Releasing bool `json:"releasing,omitempty"`
}

// PooledAddress is the address of one ippool capture.
type PooledAddress struct {
	// Capture is the capture's name.
	Capture string `json:"capture"`
	// Pool is the NodeIPPool the address is from.
	Pool string `json:"pool"`
	// IP is the address.
	IP string `json:"ip"`
}

// +kubebuilder:object:root=true

// PooledNodeNetworkConfigurationPolicyList is a list of pooled policies.
type PooledNodeNetworkConfigurationPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PooledNodeNetworkConfigurationPolicy `json:"items"`
}

// Record returns the node's addresses as an enactment's status.ippool
// records them.
func (n PooledPolicyNode) Record() EnactmentIPPools {
	out := EnactmentIPPools{}
	for _, a := range n.Addresses {
		p := out[a.Pool]
		p.Allocated = append(p.Allocated, a.IP)
		out[a.Pool] = p
	}
	for _, a := range n.Released {
		p := out[a.Pool]
		p.Releasing = append(p.Releasing, a.IP)
		out[a.Pool] = p
	}
	return out
}

// Held returns every address the node's record holds: its addresses and
// those released and not yet confirmed off its interfaces.
func (n PooledPolicyNode) Held() []PooledAddress {
	return append(append([]PooledAddress(nil), n.Addresses...), n.Released...)
}

// NodeOf returns the record of node, or nil.
func (s *PooledPolicyStatus) NodeOf(node string) *PooledPolicyNode {
	for i := range s.Nodes {
		if s.Nodes[i].Node == node {
			return &s.Nodes[i]
		}
	}
	return nil
}

// Labels and annotations of the NodeNetworkConfigurationPolicies a pooled
// policy generates.
const (
	// PooledPolicyLabel names the pooled policy that generated an NNCP.
	PooledPolicyLabel = "nmstate.io/pooled-policy"
	// PooledNodeAnnotation names the node an NNCP was generated for (a
	// node name may be too long for a label value).
	PooledNodeAnnotation = "nmstate.io/pooled-node"
	// PooledReleaseAnnotation ("true") marks a generated NNCP whose desired
	// state takes its node's released addresses off its interfaces.
	PooledReleaseAnnotation = "nmstate.io/pooled-release"
	// PooledReleaseAttemptAnnotation counts how many times such an NNCP
	// was written again after its node failed to apply it.
	PooledReleaseAttemptAnnotation = "nmstate.io/pooled-release-attempt"
	// FinalizerPooledPolicy holds a pooled policy being deleted until its
	// addresses are off its nodes' interfaces and its NNCPs are gone; and
	// each generated NNCP until its node's addresses are off (the garbage
	// collector deletes them first when the pooled policy is deleted with
	// --cascade=foreground).
	FinalizerPooledPolicy = "nmstate.io/pooled-policy"
	// FinalizerPooledNode holds a Node that a pooled policy records
	// addresses of while it is deleted, until kubernetes-nmstate's handler
	// on its machine, still running, has applied a policy that takes them
	// off: kubernetes-nmstate never undoes a deleted policy, and nothing
	// else would. A Node deleted and tainted
	// node.kubernetes.io/out-of-service (its machine is shut down) lets its
	// addresses go without that, kept for its return.
	FinalizerPooledNode = "nmstate.io/pooled-addresses"
)

// maxPolicyName bounds a policy's name: kubernetes-nmstate labels its
// enactments with it.
const maxPolicyName = 63

// NodePolicyName returns the name of the NodeNetworkConfigurationPolicy a
// pooled policy generates for node: "<policy>-<node>" when that is a valid
// label value of at most 63 characters, else its first characters and a
// hash of the whole, so that two nodes never share a name.
func NodePolicyName(policy, node string) string {
	name := policy + "-" + node
	if len(name) <= maxPolicyName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	head := strings.TrimRight(name[:maxPolicyName-len(suffix)], "-.")
	return head + suffix
}

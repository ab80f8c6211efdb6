package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeIPPool is a cluster-wide range of addresses from which node handlers
// allocate one address per (node, policy, capture). Policies reference it with
// the capture expression "ippool.<name>.allocate".
//
// The name is a DNS-1123 label (no dots) because it is part of the capture
// expression.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nip
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=".spec.range.cidr"
// +kubebuilder:printcolumn:name="Start",type=string,JSONPath=".spec.range.start"
// +kubebuilder:printcolumn:name="End",type=string,JSONPath=".spec.range.end"
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=".status.allocated"
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=".status.free"
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=".status.conditions[?(@.type==\"Available\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,priority=1,JSONPath=".status.conditions[?(@.type==\"Available\")].reason"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",messageExpression="'name ' + self.metadata.name + ' is not a DNS-1123 label: use at most 63 lower-case letters, digits and dashes, without dots, starting and ending with a letter or digit'"
type NodeIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NodeIPPoolSpec `json:"spec"`
	// +optional
	Status NodeIPPoolStatus `json:"status,omitempty"`
}

// NodeIPPoolSpec is the desired range of a pool. It cannot be changed: to
// grow or move a pool, delete and re-create it; addresses that still fit the
// new range are kept.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: delete and re-create the NodeIPPool to change its range (addresses that still fit the new range are kept)"
type NodeIPPoolSpec struct {
	// Range is the span of addresses the pool hands out.
	// +required
	Range IPRange `json:"range"`
}

// IPRange is a span of addresses inside a CIDR. Offsets count every address
// from Start to End inclusive (offset = ip - start), so excluded addresses
// keep their offsets and are never handed out.
//
// IPv4 network and broadcast addresses (for prefixes up to /30) and the IPv6
// subnet-router anycast address (for prefixes up to /126) are never handed
// out. A pool holds one address family and at most 2^64 addresses: an IPv6
// pool whose CIDR is larger than a /64 sets Start and End inside one /64.
//
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !isCIDR(self.cidr) || !isIP(self.start) || ip(self.start).family() == cidr(self.cidr).ip().family()",messageExpression="'start ' + self.start + ' and cidr ' + self.cidr + ' are of different IP families: a pool holds addresses of one family'"
// +kubebuilder:validation:XValidation:rule="!has(self.end) || !isCIDR(self.cidr) || !isIP(self.end) || ip(self.end).family() == cidr(self.cidr).ip().family()",messageExpression="'end ' + self.end + ' and cidr ' + self.cidr + ' are of different IP families: a pool holds addresses of one family'"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !isCIDR(self.cidr) || !isIP(self.start) || ip(self.start).family() != cidr(self.cidr).ip().family() || cidr(self.cidr).containsIP(self.start)",messageExpression="'start ' + self.start + ' is outside cidr ' + self.cidr + ': pick a start inside the cidr or omit it to use the first usable address'"
// +kubebuilder:validation:XValidation:rule="!has(self.end) || !isCIDR(self.cidr) || !isIP(self.end) || ip(self.end).family() != cidr(self.cidr).ip().family() || cidr(self.cidr).containsIP(self.end)",messageExpression="'end ' + self.end + ' is outside cidr ' + self.cidr + ': pick an end inside the cidr or omit it to use the last usable address'"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !has(self.end) || !isIP(self.start) || !isIP(self.end) || ip(self.start).family() != ip(self.end).family() || ip(self.start) == ip(self.end) || [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117,118,119,120,121,122,123,124,125,126,127].exists(p, p < (ip(self.start).family() == 4 ? 32 : 128) && cidr(self.start + '/' + string(p)).masked() == cidr(self.end + '/' + string(p)).masked() && cidr(self.start + '/' + string(p + 1)).masked() != cidr(self.end + '/' + string(p + 1)).masked() && cidr(self.start + '/' + string(p + 1)).masked().ip() == cidr(self.start + '/' + string(p)).masked().ip())",messageExpression="'start ' + self.start + ' is after end ' + self.end + ': swap them'"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self.cidr) || cidr(self.cidr).ip().family() == 4 || cidr(self.cidr).prefixLength() >= 64 || (has(self.start) && has(self.end) && isIP(self.start) && isIP(self.end) && ip(self.start).family() == 6 && ip(self.end).family() == 6 && cidr(self.start + '/64').masked() == cidr(self.end + '/64').masked())",messageExpression="'cidr ' + self.cidr + ' holds more than 2^64 addresses: set start and end inside one /64'"
// +kubebuilder:validation:XValidation:rule="!has(self.exclude) || !isCIDR(self.cidr) || self.exclude.all(e, !(isIP(e) || isCIDR(e)) || (isIP(e) ? ip(e).family() : cidr(e).ip().family()) == cidr(self.cidr).ip().family())",messageExpression="'exclude ' + self.exclude.filter(e, (isIP(e) || isCIDR(e)) && (isIP(e) ? ip(e).family() : cidr(e).ip().family()) != cidr(self.cidr).ip().family())[0] + ' and cidr ' + self.cidr + ' are of different IP families'"
// +kubebuilder:validation:XValidation:rule="!has(self.exclude) || !isCIDR(self.cidr) || self.exclude.all(e, !(isIP(e) || isCIDR(e)) || (isIP(e) ? ip(e).family() : cidr(e).ip().family()) != cidr(self.cidr).ip().family() || (isIP(e) ? cidr(self.cidr).containsIP(e) : cidr(self.cidr).containsCIDR(e)))",messageExpression="'exclude ' + self.exclude.filter(e, (isIP(e) || isCIDR(e)) && (isIP(e) ? ip(e).family() : cidr(e).ip().family()) == cidr(self.cidr).ip().family() && !(isIP(e) ? cidr(self.cidr).containsIP(e) : cidr(self.cidr).containsCIDR(e)))[0] + ' is outside cidr ' + self.cidr + ': remove it or fix the address'"
type IPRange struct {
	// CIDR is the subnet of the pool in canonical form, e.g. 10.10.10.0/24 or
	// 2001:db8::/64. Its prefix length is the prefix length handed out.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",messageExpression="'cidr ' + self + ' is not a CIDR: write address/prefix-length, e.g. 10.10.10.0/24 or 2001:db8::/64'"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || string(cidr(self).masked()) == self",messageExpression="'cidr ' + self + ' is not in canonical form: write ' + string(cidr(self).masked())"
	CIDR string `json:"cidr"`

	// Start is the first address of the range. Defaults to the first usable
	// address of the CIDR.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",messageExpression="'start ' + self + ' is not an IP address'"
	Start string `json:"start,omitempty"`

	// End is the last address of the range, inclusive. Defaults to the last
	// usable address of the CIDR.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",messageExpression="'end ' + self + ' is not an IP address'"
	End string `json:"end,omitempty"`

	// Exclude lists addresses (IPs, or CIDRs with no host bits set) inside the
	// CIDR that are never handed out. A CIDR may reach past Start or End.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="self.all(e, isIP(e) || (isCIDR(e) && cidr(e) == cidr(e).masked()))",messageExpression="'exclude ' + self.filter(e, !(isIP(e) || (isCIDR(e) && cidr(e) == cidr(e).masked())))[0] + ' is neither an IP address nor a CIDR without host bits, e.g. 10.10.10.4 or 10.10.10.8/30'"
	Exclude []string `json:"exclude,omitempty"`
}

// NodeIPPoolStatus is the pool's index of allocated addresses. It can always
// be rebuilt from the enactments, which are the durable record.
type NodeIPPoolStatus struct {
	// AllocatedOffsets is the set of allocated offsets (offset = ip - start)
	// as a compressed, versioned snapshot in base64 (see pkg/ippool). Empty
	// means nothing is allocated.
	// +optional
	AllocatedOffsets string `json:"allocatedOffsets,omitempty"`

	// Size is the number of addresses the pool can hand out: the range less
	// its excluded and reserved addresses. Counts saturate at 2^63-1 for
	// IPv6 ranges larger than that.
	// +optional
	Size int64 `json:"size"`
	// Allocated is the number of addresses handed out.
	// +optional
	Allocated int64 `json:"allocated"`
	// Free is Size minus Allocated.
	// +optional
	Free int64 `json:"free"`

	// ObservedGeneration is the generation the pool controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions hold the Available condition; see the Reason constants.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeIPPoolList is a list of NodeIPPools.
//
// +kubebuilder:object:root=true
type NodeIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeIPPool `json:"items"`
}

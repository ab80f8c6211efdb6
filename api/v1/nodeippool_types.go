package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NodeIPPool is a cluster-wide range of addresses, one per (node, policy,
// capture) and per Cluster API claim, handed out by the pool controller (or a
// node's handler with --self-allocate). Policies reference it with the
// capture expression "ippool.<name>.allocate".
//
// The name is a DNS-1123 label (no dots) because it is part of the capture
// expression.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nip
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=".spec.range.cidr"
// +kubebuilder:printcolumn:name="Start",type=string,JSONPath=".status.start"
// +kubebuilder:printcolumn:name="End",type=string,JSONPath=".status.end"
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=".status.size"
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

// NodeIPPoolSpec is the desired range of a pool, with what a node needs
// beside its address (gateway, DNS) and the addresses pinned to nodes.
//
// The CIDR, the gateway and the DNS settings cannot be changed. The range's
// start, end and exclude may change in place as long as no address in use
// leaves the range or is excluded: the pool controller's admission webhook
// refuses any other change and names the holders; 'kubectl nodeippool plan
// -f' shows a change beforehand. Moving the start moves every offset, so the
// pool is rebuilt (ReconcilingPool) before it hands out addresses again.
// Reservations may change at any time.
//
// +kubebuilder:validation:XValidation:rule="self.range.cidr == oldSelf.range.cidr",messageExpression="'spec.range.cidr is immutable (' + oldSelf.range.cidr + '): to renumber the pool into another subnet, create a new NodeIPPool and point the policies at it; start, end and exclude may change in place'"
// +kubebuilder:validation:XValidation:rule="has(self.gateway) == has(oldSelf.gateway) && (!has(self.gateway) || self.gateway == oldSelf.gateway)",message="spec.gateway is immutable: the enactments record it with every address; create a new pool to change it"
// +kubebuilder:validation:XValidation:rule="has(self.dns) == has(oldSelf.dns) && (!has(self.dns) || self.dns == oldSelf.dns)",message="spec.dns is immutable: the enactments record it with every address; create a new pool to change it"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isCIDR(self.range.cidr) || !isIP(self.gateway) || (ip(self.gateway).family() == cidr(self.range.cidr).ip().family() && cidr(self.range.cidr).containsIP(self.gateway))",messageExpression="'gateway ' + self.gateway + ' is outside cidr ' + self.range.cidr + ': the gateway must be on the subnet of the pool'"
type NodeIPPoolSpec struct {
	// Range is the span of addresses the pool hands out.
	// +required
	Range IPRange `json:"range"`

	// Gateway is the next hop of the pool's subnet. It must lie inside the
	// CIDR and is never handed out. Desired states use it as
	// {{ capture.<name>.gateway }}. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",messageExpression="'gateway ' + self + ' is not an IP address'"
	Gateway string `json:"gateway,omitempty"`

	// DNS holds the name servers and search domains a node on this subnet
	// uses. Desired states use them as {{ capture.<name>.dns-servers }} and
	// {{ capture.<name>.dns-search }}. Immutable.
	// +optional
	DNS *DNS `json:"dns,omitempty"`

	// Reservations pin addresses of the range to nodes. A reserved address
	// is handed to the node it names (or the node its selector matches)
	// and to nobody else; other nodes get addresses outside the
	// reservations. A node whose reservation is taken by another holder
	// gets another address, and the pool's ReservationsHonored condition
	// says who holds it. Reservations may be added, changed and removed at
	// any time; a node that holds an address keeps it (see
	// ReservationsHonored for how to move it).
	// +optional
	// +listType=map
	// +listMapKey=ip
	// +kubebuilder:validation:MaxItems=256
	Reservations []Reservation `json:"reservations,omitempty"`

	// ClaimNamespaceSelector limits the namespaces whose Cluster API
	// IPAddressClaims the pool serves: a claim from a namespace whose
	// labels do not match gets no address, and its Ready condition says so
	// (False, NamespaceNotAllowed). Unset, the pool serves claims from
	// every namespace, as Cluster API's global pools do. Select namespaces
	// by name with the label kubernetes.io/metadata.name, which every
	// namespace carries. Narrowing it takes no address from a claim that
	// holds one. Nodes are served whatever it says.
	// +optional
	ClaimNamespaceSelector *metav1.LabelSelector `json:"claimNamespaceSelector,omitempty"`
}

// DNS is the name resolution of a pool's subnet.
type DNS struct {
	// Servers are name server addresses, in order of preference.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="self.all(s, isIP(s))",messageExpression="'dns server ' + self.filter(s, !isIP(s))[0] + ' is not an IP address'"
	Servers []string `json:"servers,omitempty"`
	// Search are the search domains, in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(d, d.matches('^[a-zA-Z0-9]([-.a-zA-Z0-9]*[a-zA-Z0-9])?$'))",messageExpression="'dns search domain ' + self.filter(d, !d.matches('^[a-zA-Z0-9]([-.a-zA-Z0-9]*[a-zA-Z0-9])?$'))[0] + ' is not a domain name'"
	Search []string `json:"search,omitempty"`
}

// Reservation pins one address of the range to one node, named or
// selected by labels (for example a label that survives the node's
// replacement under another name). When several of a node's captures draw
// from the pool, they take its reservations in capture-name order.
//
// +kubebuilder:validation:XValidation:rule="has(self.node) != has(self.nodeSelector)",message="a reservation names a node or selects one by labels: set exactly one of node and nodeSelector"
type Reservation struct {
	// IP is the reserved address, inside the range and not excluded.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",messageExpression="'reservation ' + self + ' is not an IP address'"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || string(ip(self)) == self",message="a reservation is not an address in canonical form: write IPv6 addresses in lower case, compressed (2001:db8::5), so that an address is listed once, in one spelling"
	IP string `json:"ip"`
	// Node is the name of the node the address is for.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// NodeSelector selects the node the address is for by its labels. If
	// several nodes match, the first to ask gets it.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Policy limits the reservation to the captures of one
	// NodeNetworkConfigurationPolicy. Empty: any policy that draws from
	// the pool on that node.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Policy string `json:"policy,omitempty"`
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
// That start is not after end is checked by two more rules of the CRD,
// one per family, which hack/range-order generates (CEL has no ordering
// of IP addresses: its package comment says how they compare).
//
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !isCIDR(self.cidr) || !isIP(self.start) || ip(self.start).family() == cidr(self.cidr).ip().family()",messageExpression="'start ' + self.start + ' and cidr ' + self.cidr + ' are of different IP families: a pool holds addresses of one family'"
// +kubebuilder:validation:XValidation:rule="!has(self.end) || !isCIDR(self.cidr) || !isIP(self.end) || ip(self.end).family() == cidr(self.cidr).ip().family()",messageExpression="'end ' + self.end + ' and cidr ' + self.cidr + ' are of different IP families: a pool holds addresses of one family'"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !isCIDR(self.cidr) || !isIP(self.start) || ip(self.start).family() != cidr(self.cidr).ip().family() || cidr(self.cidr).containsIP(self.start)",messageExpression="'start ' + self.start + ' is outside cidr ' + self.cidr + ': pick a start inside the cidr or omit it to use the first usable address'"
// +kubebuilder:validation:XValidation:rule="!has(self.end) || !isCIDR(self.cidr) || !isIP(self.end) || ip(self.end).family() != cidr(self.cidr).ip().family() || cidr(self.cidr).containsIP(self.end)",messageExpression="'end ' + self.end + ' is outside cidr ' + self.cidr + ': pick an end inside the cidr or omit it to use the last usable address'"
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
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || string(cidr(self).masked()) == self",messageExpression="'cidr ' + self + ' is not in canonical form: write the network address in lower case with no host bits set, e.g. 10.10.10.0/24 or 2001:db8::/64'"
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
// be rebuilt from the holders' records, which are the durable record.
type NodeIPPoolStatus struct {
	// AllocatedOffsets is the set of allocated offsets (offset = ip - start)
	// as a compressed, versioned snapshot in base64 ('kubectl nodeippool
	// decode' and 'explain --allocated' read it). Empty means nothing is
	// allocated.
	// +optional
	AllocatedOffsets string `json:"allocatedOffsets,omitempty"`

	// Start is the first address of the range, its default included.
	// +optional
	Start string `json:"start,omitempty"`
	// End is the last address of the range, its default included.
	// +optional
	End string `json:"end,omitempty"`

	// Size is the number of addresses the pool can hand out: the range less
	// its excluded addresses, the gateway, and the network, broadcast or
	// subnet-router anycast addresses. Reserved addresses count. Counts saturate at 2^63-1 for
	// IPv6 ranges larger than that.
	// +optional
	Size int64 `json:"size"`
	// Allocated is the number of addresses handed out.
	// +optional
	Allocated int64 `json:"allocated"`
	// Free is Size minus Allocated.
	// +optional
	Free int64 `json:"free"`

	// InFlight lists addresses taken from the pool (by the pool controller,
	// or a handler with --self-allocate) that their holder has not recorded
	// yet. One left unrecorded past --gc-grace-period is settled: an
	// enactment's or a pooled policy's is revoked, its holder fenced first;
	// a claim's is kept while the claim may still create its IPAddress,
	// then dropped, its bit left to garbage collection. A rebuild keeps it.
	// +optional
	// +listType=map
	// +listMapKey=ip
	// +kubebuilder:validation:MaxItems=4096
	InFlight []InFlightAddress `json:"inFlight,omitempty"`

	// Quarantined lists addresses taken from their holder (release, reset,
	// node removal) that stay allocated until there is evidence that the
	// holder no longer carries them: its NodeNetworkState, published after
	// the release, without them, or its Node gone. Time alone never lifts
	// a quarantine: past the quarantine period the ReleasesConfirmed
	// condition says which node still carries what. Nobody is handed a
	// quarantined address.
	// +optional
	// +listType=map
	// +listMapKey=ip
	// +kubebuilder:validation:MaxItems=4096
	Quarantined []QuarantinedAddress `json:"quarantined,omitempty"`

	// KeptForReturn lists free addresses whose Node was deleted, each kept
	// for the node's return under the same name until the quarantine
	// period has passed since it was freed (see KeptAddress.Since). The
	// address is free (its bit is clear, Free counts it): the enactment of
	// the same name asking again for the same capture gets it back, and
	// other nodes get one only when no other address is free, the longest
	// kept first. An entry steers a free address, it never holds one.
	// +optional
	// +listType=map
	// +listMapKey=ip
	// +kubebuilder:validation:MaxItems=4096
	KeptForReturn []KeptAddress `json:"keptForReturn,omitempty"`

	// Stamp vouches for allocatedOffsets, inFlight and quarantined: a digest
	// of them and of the pool's UID, written by the pool controller after a
	// rebuild and by every writer that verified the previous stamp. Handlers
	// allocate only from a status whose stamp matches; any other change (a
	// hand edit, a status restored from another pool) makes the pool
	// controller rebuild the pool from its holders' records first.
	// +optional
	Stamp string `json:"stamp,omitempty"`

	// ObservedGeneration is the generation the pool controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions hold the Available, ReservationsHonored and
	// ReleasesConfirmed conditions; see the Reason constants.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InFlightAddress is an address taken for a holder (an enactment, a pooled
// policy's node, a Cluster API claim) and about to be recorded there.
// +kubebuilder:validation:XValidation:rule="has(self.holder) || has(self.enactment)",message="name the holder in holder"
// +kubebuilder:validation:XValidation:rule="!has(self.holder) || !has(self.enactment) || self.holder == self.enactment",message="enactment is the deprecated name of holder: when both are set they must be equal"
type InFlightAddress struct {
	// IP is the address.
	IP string `json:"ip"`
	// Holder is the holder the address is for (see HolderName).
	// +optional
	// +kubebuilder:validation:MaxLength=600
	Holder string `json:"holder,omitempty"`
	// DeprecatedEnactment is holder's name before holder existed, read
	// only from entries that have no holder. Deprecated: read holder; it
	// is written alongside it, equal, so that earlier versions read the
	// entries this one writes.
	// +optional
	// +kubebuilder:validation:MaxLength=600
	DeprecatedEnactment string `json:"enactment,omitempty"`
	// Token says which incarnation of the holder the address was taken
	// for: an enactment's or a pooled policy's resourceVersion when it was
	// taken, a claim's UID. The record is written under that
	// resourceVersion (by the pool controller, or by a self-allocating
	// handler), so a fence (any write to the enactment or policy) makes a
	// late record fail; a claim's record cannot be fenced, and its entry is
	// kept for as long as a late record may come.
	Token string `json:"token"`
	// Since is when the address was taken.
	Since metav1.Time `json:"since"`
	// Returning is the quarantine entry the address was handed back from,
	// to the holder it was taken from, or to the node found carrying it:
	// if the address is given back without being recorded (withdrawn,
	// revoked), it goes back to that quarantine, not to the free
	// addresses, since that node may still carry it.
	// +optional
	Returning *QuarantinedAddress `json:"returning,omitempty"`
	// Kept is the keptForReturn entry the address was taken from (handed
	// back to its holder, or reclaimed from a full pool): if the address
	// is given back without being recorded (withdrawn, revoked), it is
	// kept again, so that its holder still gets it back first.
	// +optional
	Kept *KeptAddress `json:"kept,omitempty"`
}

// QuarantinedAddress is an address taken from its holder, kept from
// everyone else until the holder no longer carries it.
// +kubebuilder:validation:XValidation:rule="!has(self.holder) || !has(self.enactment) || self.holder == self.enactment",message="enactment is the deprecated name of holder: when both are set they must be equal"
type QuarantinedAddress struct {
	// IP is the address.
	IP string `json:"ip"`
	// Node is the node that held it.
	// +optional
	Node string `json:"node,omitempty"`
	// NodeUID is the UID of that Node, which tells it from a replacement
	// under the same name.
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty"`
	// Holder is the holder that recorded it (see HolderName).
	// +optional
	// +kubebuilder:validation:MaxLength=600
	Holder string `json:"holder,omitempty"`
	// DeprecatedEnactment is holder's name before holder existed, read
	// only from entries that have no holder. Deprecated: read holder; it
	// is written alongside it, equal, so that earlier versions read the
	// entries this one writes.
	// +optional
	// +kubebuilder:validation:MaxLength=600
	DeprecatedEnactment string `json:"enactment,omitempty"`
	// Capture is the capture that held it, when the address is kept for its
	// holder's return: while the quarantine lasts, the enactment of the same
	// name asking again for this capture (its node re-added under the same
	// name, its policy matching the node again) gets it back. Empty for an
	// address taken by a reset or found unrecorded, which goes to nobody
	// until the quarantine is lifted.
	// +optional
	Capture string `json:"capture,omitempty"`
	// Interface is the interface the address was applied to, from the
	// record; empty if the record did not say.
	// +optional
	Interface string `json:"interface,omitempty"`
	// Since is when the release began: the releaser writes its own time,
	// and the pool controller replaces it with its own clock's when it asks
	// the holder for evidence, so that every quarantine is timed on one
	// clock.
	Since metav1.Time `json:"since"`
	// StateSeenAtRelease is the lastSuccessfulUpdateTime of the holder's
	// NodeNetworkState (stamped by the holder's node) as the pool
	// controller read it once the record was gone; the zero time when the
	// node had published none. A state the node publishes later was read
	// after the release: when it does not carry the address, the
	// quarantine is lifted. Empty until the controller has looked.
	// +optional
	StateSeenAtRelease *metav1.Time `json:"stateSeenAtRelease,omitempty"`
}

// KeptAddress is a free address kept for the return of the node that held
// it (see NodeIPPoolStatus.KeptForReturn).
// +kubebuilder:validation:XValidation:rule="has(self.holder) || has(self.enactment)",message="name the holder in holder"
// +kubebuilder:validation:XValidation:rule="!has(self.holder) || !has(self.enactment) || self.holder == self.enactment",message="enactment is the deprecated name of holder: when both are set they must be equal"
type KeptAddress struct {
	// IP is the address.
	IP string `json:"ip"`
	// Node is the deleted node that held it.
	Node string `json:"node"`
	// Holder is the holder that recorded it (see HolderName); the holder
	// of the same name gets it back.
	// +optional
	// +kubebuilder:validation:MaxLength=600
	Holder string `json:"holder,omitempty"`
	// DeprecatedEnactment is holder's name before holder existed, read
	// only from entries that have no holder. Deprecated: read holder; it
	// is written alongside it, equal, so that earlier versions read the
	// entries this one writes.
	// +optional
	// +kubebuilder:validation:MaxLength=600
	DeprecatedEnactment string `json:"enactment,omitempty"`
	// Capture is the capture of that enactment that held it.
	Capture string `json:"capture"`
	// Since is when the address was freed and kept (for a Node replaced
	// under its name, when it was taken from its holder); it is kept until
	// the quarantine period has passed since.
	Since metav1.Time `json:"since"`
}

// NodeIPPoolList is a list of NodeIPPools.
//
// +kubebuilder:object:root=true
type NodeIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeIPPool `json:"items"`
}

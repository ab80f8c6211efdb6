// Package capi reads and writes the Cluster API IPAM objects a NodeIPPool
// serves (IPAddressClaim, IPAddress of ipam.cluster.x-k8s.io), without a
// dependency on the Cluster API module: the objects are unstructured, read
// through whichever of the versions v1beta2 and v1beta1 the API server
// serves, so the same binary works with Cluster API releases that store
// either.
//
// The IPAddress objects are the durable records of the addresses claims
// hold, as enactments' status.ippool are for nodes. holder.List presents
// each as a record the pool's index is rebuilt from and every check counts
// in (poolstatus.OwnersOf): one uniqueness domain for nodes and claims. A
// missing CRD is not an error: no claim can hold an address then.
package capi

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

const (
	// Group is the API group of the Cluster API IPAM objects.
	Group = "ipam.cluster.x-k8s.io"
	// ClaimKind is the kind of a claim.
	ClaimKind = "IPAddressClaim"
	// AddressKind is the kind of the address that fulfils a claim.
	AddressKind = "IPAddress"

	// ReleaseFinalizer is on every claim this provider serves: the claim
	// goes only once its address is quarantined and its IPAddress deleted.
	ReleaseFinalizer = "ipam.cluster.x-k8s.io/ReleaseAddress"
	// ProtectFinalizer is on every IPAddress this provider creates: an
	// IPAddress deleted while its claim exists is put back as it was.
	ProtectFinalizer = "ipam.cluster.x-k8s.io/ProtectAddress"

	// PausedAnnotation on a claim, or spec.paused on its Cluster, pauses
	// the claim: it is left alone.
	PausedAnnotation = "cluster.x-k8s.io/paused"
	// ClusterNameLabel names a claim's Cluster when spec.clusterName does
	// not.
	ClusterNameLabel = "cluster.x-k8s.io/cluster-name"
	// RestoreAnnotation on a claim holds the address of its IPAddress
	// while that IPAddress is deleted and created again: a provider that
	// restarts meanwhile takes the same address back.
	RestoreAnnotation = "nmstate.io/ippool-restore-address"
	// RequestedAddressAnnotation asks for one address of the pool, as
	// metal3's IP address manager honours it on IPAddressClaims.
	RequestedAddressAnnotation = "ipAddress"
)

// Versions are the versions of the IPAM group this provider speaks, the
// preferred first.
var Versions = []string{"v1beta2", "v1beta1"}

// ClusterGVK is the Cluster a claim belongs to, read for spec.paused.
var ClusterGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}

// Served returns the preferred version of the IPAM group that mapper
// knows, and false when the IPAddressClaim and IPAddress CRDs are not
// installed.
func Served(mapper meta.RESTMapper) (string, bool, error) {
	for _, v := range Versions {
		_, errClaim := mapper.RESTMapping(schema.GroupKind{Group: Group, Kind: ClaimKind}, v)
		_, errAddr := mapper.RESTMapping(schema.GroupKind{Group: Group, Kind: AddressKind}, v)
		switch {
		case errClaim == nil && errAddr == nil:
			return v, true, nil
		case errClaim != nil && !meta.IsNoMatchError(errClaim):
			return "", false, fmt.Errorf("look up %s.%s: %w", ClaimKind, Group, errClaim)
		case errAddr != nil && !meta.IsNoMatchError(errAddr):
			return "", false, fmt.Errorf("look up %s.%s: %w", AddressKind, Group, errAddr)
		}
	}
	return "", false, nil
}

// NewClaim returns an empty IPAddressClaim of version to read into.
func NewClaim(version string) *unstructured.Unstructured { return newObject(version, ClaimKind) }

// NewAddress returns an empty IPAddress of version to read into.
func NewAddress(version string) *unstructured.Unstructured { return newObject(version, AddressKind) }

func newObject(version, kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: Group, Version: version, Kind: kind})
	return u
}

// NewClaimList returns an empty list of IPAddressClaims of version.
func NewClaimList(version string) *unstructured.UnstructuredList {
	return newList(version, ClaimKind)
}

// NewAddressList returns an empty list of IPAddresses of version.
func NewAddressList(version string) *unstructured.UnstructuredList {
	return newList(version, AddressKind)
}

func newList(version, kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(schema.GroupVersionKind{Group: Group, Version: version, Kind: kind + "List"})
	return l
}

// PoolRef is a claim's or address's spec.poolRef.
type PoolRef struct {
	APIGroup, Kind, Name string
}

// Ours reports whether the reference names a NodeIPPool.
func (p PoolRef) Ours() bool {
	return p.APIGroup == ippoolv1.GroupVersion.Group && p.Kind == "NodeIPPool" && p.Name != ""
}

// PoolRefOf reads spec.poolRef of a claim or address (apiGroup is a string
// in v1beta2 and an optional string in v1beta1: both read the same).
func PoolRefOf(u *unstructured.Unstructured) PoolRef {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "poolRef", "apiGroup")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "poolRef", "kind")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "poolRef", "name")
	return PoolRef{APIGroup: group, Kind: kind, Name: name}
}

// Address is an IPAddress, read.
type Address struct {
	Namespace, Name string
	// Claim is spec.claimRef.name.
	Claim string
	Pool  PoolRef
	// IP is spec.address; invalid when it does not parse.
	IP      netip.Addr
	Prefix  int64
	Gateway string
	// Terminating: the IPAddress is being deleted.
	Terminating bool
}

// AddressOf reads an IPAddress.
func AddressOf(u *unstructured.Unstructured) Address {
	claim, _, _ := unstructured.NestedString(u.Object, "spec", "claimRef", "name")
	s, _, _ := unstructured.NestedString(u.Object, "spec", "address")
	prefix, _, _ := unstructured.NestedInt64(u.Object, "spec", "prefix")
	gateway, _, _ := unstructured.NestedString(u.Object, "spec", "gateway")
	ip, _ := netip.ParseAddr(s)
	return Address{Namespace: u.GetNamespace(), Name: u.GetName(), Claim: claim, Pool: PoolRefOf(u), IP: ip,
		Prefix: prefix, Gateway: gateway, Terminating: u.GetDeletionTimestamp() != nil}
}

// The conditions of a claim and their reasons. Ready and its False
// reasons are Cluster API's (api/ipam: PoolNotReady, PoolExhausted,
// AllocationFailed), but NamespaceNotAllowed, ours; Paused is the
// condition Cluster API's v1beta2 objects carry.
const (
	ConditionReady  = "Ready"
	ConditionPaused = "Paused"

	ReasonAllocated        = "AddressAllocated"
	ReasonPoolNotReady     = "PoolNotReady"
	ReasonPoolExhausted    = "PoolExhausted"
	ReasonAllocationFailed = "AllocationFailed"
	ReasonPaused           = "Paused"
	// ReasonNamespaceNotAllowed: the pool's spec.claimNamespaceSelector
	// does not select the claim's namespace.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	ReasonNotPaused           = "NotPaused"
)

// ReasonAddressRestored is the Event of a claim whose IPAddress was
// deleted while the claim exists, and is created again.
const ReasonAddressRestored = "AddressRestored"

// ReasonAddressAdopted is the Event of a claim that adopts the IPAddress
// bearing its name that the provider did not sign for it (restored from
// a backup, or made by an earlier version).
const ReasonAddressAdopted = "AddressAdopted"

// ClusterOf names the Cluster of a claim: spec.clusterName, else its
// cluster.x-k8s.io/cluster-name label; "" when neither says.
func ClusterOf(claim *unstructured.Unstructured) string {
	if name, _, _ := unstructured.NestedString(claim.Object, "spec", "clusterName"); name != "" {
		return name
	}
	return claim.GetLabels()[ClusterNameLabel]
}

// NewCluster returns an empty Cluster of version to read into.
func NewCluster(version string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ClusterGVK.GroupKind().WithVersion(version))
	return u
}

// ClusterServed returns the preferred served version of Cluster API's
// Cluster, or "" when its CRD is not installed.
func ClusterServed(mapper meta.RESTMapper) (string, error) {
	for _, v := range []string{"v1beta2", "v1beta1"} {
		_, err := mapper.RESTMapping(ClusterGVK.GroupKind(), v)
		switch {
		case err == nil:
			return v, nil
		case !meta.IsNoMatchError(err):
			return "", fmt.Errorf("look up Cluster.%s: %w", ClusterGVK.Group, err)
		}
	}
	return "", nil
}

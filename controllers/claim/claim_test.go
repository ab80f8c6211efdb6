package claim_test

import (
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolmetrics"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestClaimServed: a claim of a NodeIPPool gets an IPAddress of its name
// with the pool's address, prefix and gateway, its claim and pool, owned
// by the claim and protected; the claim points at it, is Ready and keeps a
// release finalizer; the pool's bitmap holds the address. A claim of
// another provider's pool is left alone.
func TestClaimServed(t *testing.T) {
	begin(t, "served", "claims-served", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.1.0/24", Start: "10.80.1.10", End: "10.80.1.20"},
		Gateway: "10.80.1.1"})
	c := createClaim(t, "served", "m1-eth0-0", "claims-served", func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{capi.ClusterNameLabel: "c1"})
	})
	other := createClaim(t, "served", "other", "x", func(u *unstructured.Unstructured) {
		Expect(unstructured.SetNestedField(u.Object, "ipam.cluster.x-k8s.io", "spec", "poolRef", "apiGroup")).To(Succeed())
		Expect(unstructured.SetNestedField(u.Object, "InClusterIPPool", "spec", "poolRef", "kind")).To(Succeed())
	})

	Eventually(readiness("served", "m1-eth0-0")).Should(Equal("True AddressAllocated: 10.80.1.10/24 from NodeIPPool claims-served"))
	a, err := getAddress("served", "m1-eth0-0")
	Expect(err).NotTo(HaveOccurred())
	Expect(a.Object["spec"]).To(Equal(map[string]any{
		"address": "10.80.1.10", "prefix": int64(24), "gateway": "10.80.1.1",
		"claimRef": map[string]any{"name": "m1-eth0-0"},
		"poolRef":  map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "claims-served"},
	}))
	Expect(a.GetFinalizers()).To(ConsistOf(capi.ProtectFinalizer))
	Expect(a.GetLabels()).To(HaveKeyWithValue(capi.ClusterNameLabel, "c1"))
	Expect(a.GetOwnerReferences()).To(HaveLen(1))
	Expect(a.GetOwnerReferences()[0].Kind).To(Equal("IPAddressClaim"))
	Expect(*a.GetOwnerReferences()[0].Controller).To(BeTrue())

	Expect(k.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
	Expect(c.GetFinalizers()).To(ConsistOf(capi.ReleaseFinalizer))
	ref, _, _ := unstructured.NestedString(c.Object, "status", "addressRef", "name")
	Expect(ref).To(Equal("m1-eth0-0"))
	Expect(condition("served", "m1-eth0-0", capi.ConditionPaused)()).To(Equal("False NotPaused: "))
	deprecated, _, _ := unstructured.NestedSlice(c.Object, "status", "deprecated", "v1beta1", "conditions")
	Expect(deprecated).To(ContainElement(HaveKeyWithValue("type", "Ready")), "v1beta1 clients read the v1beta1 conditions")
	Eventually(bits("claims-served")).Should(Equal([]string{"10.80.1.10"}))
	Eventually(events("IPAddressClaim", "served", "m1-eth0-0")).Should(ContainElement(
		"AddressAllocated: 10.80.1.10/24 from NodeIPPool claims-served"))

	// The in-flight entry goes once the IPAddress records the address.
	Eventually(func() int {
		var p ippoolv1.NodeIPPool
		_ = k.Get(ctx, types.NamespacedName{Name: "claims-served"}, &p)
		return len(p.Status.InFlight)
	}, 3*grace+15*time.Second).Should(BeZero())

	Consistently(func() []string {
		_ = k.Get(ctx, client.ObjectKeyFromObject(other), other)
		return other.GetFinalizers()
	}, time.Second).Should(BeEmpty(), "another provider's claim is not ours")
}

// TestClaimReleased: a deleted claim's IPAddress goes, and its address is
// quarantined on the node that carries it until that node's
// NodeNetworkState, written after the release, shows it gone; then it is
// free. A claim whose address no node carries frees it at once.
func TestClaimReleased(t *testing.T) {
	pc := begin(t, "released", "claims-released", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.2.0/24", Start: "10.80.2.1", End: "10.80.2.9"}})
	// One after the other: claims asking together are served in no
	// particular order.
	createClaim(t, "released", "carried", "claims-released")
	Eventually(addressOf("released", "carried")).Should(Equal("10.80.2.1"))
	createClaim(t, "released", "lone", "claims-released")
	Eventually(addressOf("released", "lone")).Should(Equal("10.80.2.2"))

	// The machine of "carried" joined as node claimnode01 and carries it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "claimnode01"}}
	Expect(k.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, node) })
	publishState(t, pc, "claimnode01", `{"interfaces":[{"name":"eth0","ipv4":{"address":[{"ip":"10.80.2.1","prefix-length":24}]}}]}`, time.Now())

	Expect(k.Delete(ctx, newClaim("released", "carried", "claims-released"))).To(Succeed())
	Expect(k.Delete(ctx, newClaim("released", "lone", "claims-released"))).To(Succeed())
	Eventually(func() error { _, err := getAddress("released", "carried"); return err }).Should(MatchError(ContainSubstring("not found")))
	Eventually(func() error {
		return k.Get(ctx, types.NamespacedName{Namespace: "released", Name: "carried"}, capi.NewClaim(version))
	}).Should(MatchError(ContainSubstring("not found")), "the claim goes once its address is quarantined")
	Eventually(bits("claims-released")).Should(Equal([]string{"10.80.2.1"}), "no node carried 10.80.2.2: free at once")
	Expect(quarantined("claims-released")()).To(Equal([]string{"10.80.2.1 claimnode01"}))

	// A new claim does not get the quarantined address.
	createClaim(t, "released", "next", "claims-released")
	Eventually(addressOf("released", "next")).Should(Equal("10.80.2.2"))
	Consistently(bits("claims-released"), 2*grace).Should(ContainElement("10.80.2.1"))

	publishState(t, pc, "claimnode01", `{"interfaces":[{"name":"eth0"}]}`, time.Now().Add(time.Minute))
	Eventually(quarantined("claims-released")).Should(BeEmpty())
	Eventually(bits("claims-released")).Should(Equal([]string{"10.80.2.2"}))
}

// TestClaimExhaustedThenServed: a claim a full pool cannot serve is
// Ready=False PoolExhausted with a message that names the pool, and is
// served as soon as an address is freed. A claim of a missing pool says
// so, and is served once the pool exists.
func TestClaimExhaustedThenServed(t *testing.T) {
	RegisterTestingT(t)
	waiting := poolmetrics.NewWaiting()
	startController(t, func(pc *envtest.PoolController) { pc.Claims.Waiting = waiting })
	createNamespace(t, "exhausted")
	createClaim(t, "exhausted", "early", "claims-exhausted")
	Eventually(readiness("exhausted", "early")).Should(Equal("False PoolNotReady: NodeIPPool claims-exhausted does not exist: " +
		"create it, or point spec.poolRef at an existing pool ('kubectl get nodeippools')"))
	createPool(t, "claims-exhausted", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.3.0/30"}})
	Eventually(addressOf("exhausted", "early")).Should(Equal("10.80.3.1"))
	createClaim(t, "exhausted", "second", "claims-exhausted")
	Eventually(addressOf("exhausted", "second")).Should(Equal("10.80.3.2"))

	createClaim(t, "exhausted", "third", "claims-exhausted")
	Eventually(readiness("exhausted", "third")).Should(HavePrefix(
		"False PoolExhausted: NodeIPPool claims-exhausted has no address left for this claim (2 of 2 allocated"))
	Eventually(events("IPAddressClaim", "exhausted", "third")).Should(ContainElement(HavePrefix("PoolExhausted: NodeIPPool claims-exhausted")))
	Expect(waiting.On("claims-exhausted")).To(Equal([]string{"IPAddressClaim/exhausted/third"}), "the metric of waiting holders counts it")

	Expect(k.Delete(ctx, newClaim("exhausted", "early", "claims-exhausted"))).To(Succeed())
	Eventually(addressOf("exhausted", "third")).Should(Equal("10.80.3.1"))
	Eventually(readiness("exhausted", "third")).Should(HavePrefix("True AddressAllocated"))
	Expect(waiting.On("claims-exhausted")).To(BeEmpty())
}

// TestPausedClaims: the claims of a paused Cluster, and a claim annotated
// paused, are left alone (no finalizer, no address) but for their Paused
// condition, and are served once unpaused.
func TestPausedClaims(t *testing.T) {
	begin(t, "paused", "claims-paused", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.4.0/24"}})
	cluster := &unstructured.Unstructured{}
	cluster.SetAPIVersion("cluster.x-k8s.io/v1beta2")
	cluster.SetKind("Cluster")
	cluster.SetNamespace("paused")
	cluster.SetName("c1")
	cluster.Object["spec"] = map[string]any{"paused": true}
	Expect(k.Create(ctx, cluster)).To(Succeed())

	createClaim(t, "paused", "of-cluster", "claims-paused", func(u *unstructured.Unstructured) {
		Expect(unstructured.SetNestedField(u.Object, "c1", "spec", "clusterName")).To(Succeed())
	})
	createClaim(t, "paused", "annotated", "claims-paused", func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{capi.PausedAnnotation: ""})
	})
	for name, why := range map[string]string{"of-cluster": "Cluster c1 has spec.paused", "annotated": "annotation cluster.x-k8s.io/paused on the claim"} {
		Eventually(condition("paused", name, capi.ConditionPaused)).Should(Equal("True Paused: Paused by the " + why + ": the claim is left as it is"))
		Expect(readiness("paused", name)()).To(Equal("False Paused: The claim is paused (" + why + "): it is served once it is unpaused"))
		_, err := getAddress("paused", name)
		Expect(err).To(MatchError(ContainSubstring("not found")))
		c := capi.NewClaim(version)
		Expect(k.Get(ctx, types.NamespacedName{Namespace: "paused", Name: name}, c)).To(Succeed())
		Expect(c.GetFinalizers()).To(BeEmpty(), "a paused claim is left alone")
	}

	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		cluster.Object["spec"] = map[string]any{"paused": false}
		return k.Update(ctx, cluster)
	})).To(Succeed())
	Eventually(addressOf("paused", "of-cluster")).Should(Equal("10.80.4.1"))
	Eventually(readiness("paused", "of-cluster")).Should(HavePrefix("True AddressAllocated"))
	Expect(condition("paused", "of-cluster", capi.ConditionPaused)()).To(HavePrefix("False NotPaused"))
	_, err := getAddress("paused", "annotated")
	Expect(err).To(MatchError(ContainSubstring("not found")), "still paused by its annotation")
}

// TestAddressRestored: an IPAddress deleted while its claim exists comes
// back identical, and its address is never free meanwhile.
func TestAddressRestored(t *testing.T) {
	begin(t, "restored", "claims-restored", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.5.0/24", Start: "10.80.5.5", End: "10.80.5.9"}})
	createClaim(t, "restored", "m1", "claims-restored")
	Eventually(addressOf("restored", "m1")).Should(Equal("10.80.5.5"))
	before, err := getAddress("restored", "m1")
	Expect(err).NotTo(HaveOccurred())

	Expect(k.Delete(ctx, before)).To(Succeed())
	Eventually(liveAddress("restored", "m1")).ShouldNot(BeElementOf(types.UID(""), before.GetUID()))
	after, err := getAddress("restored", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(after.Object["spec"]).To(Equal(before.Object["spec"]))
	Expect(after.GetFinalizers()).To(Equal(before.GetFinalizers()))
	Expect(after.GetOwnerReferences()).To(Equal(before.GetOwnerReferences()))
	Expect(bits("claims-restored")()).To(Equal([]string{"10.80.5.5"}))
	Eventually(events("IPAddressClaim", "restored", "m1")).Should(ContainElement(
		"AddressRestored: IPAddress restored/m1 was deleted while this claim exists: it is created again with 10.80.5.5"))
	Expect(readiness("restored", "m1")()).To(HavePrefix("True AddressAllocated: 10.80.5.5/24"))
}

// TestClaimsAndNodesShareOnePool: an address a node's enactment records is
// never handed to a claim, an address a claim holds counts in the pool's
// collision check (naming the claim), and a requested address is served
// when free and refused, saying why, when not.
func TestClaimsAndNodesShareOnePool(t *testing.T) {
	begin(t, "shared", "claims-shared", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.6.0/24", Start: "10.80.6.1", End: "10.80.6.9"},
		Reservations: []ippoolv1.Reservation{{IP: "10.80.6.3", Node: "somenode"}}})
	recordByNode(t, "sharednode01.p", "claims-shared", "10.80.6.1")
	Eventually(bits("claims-shared")).Should(ContainElement("10.80.6.1"))

	createClaim(t, "shared", "c1", "claims-shared")
	createClaim(t, "shared", "c2", "claims-shared")
	Eventually(addressOf("shared", "c1")).Should(BeElementOf("10.80.6.2", "10.80.6.4"))
	Eventually(addressOf("shared", "c2")).Should(BeElementOf("10.80.6.2", "10.80.6.4"))
	Expect(addressOf("shared", "c1")()).NotTo(Equal(addressOf("shared", "c2")()))

	createClaim(t, "shared", "wants-7", "claims-shared", func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{capi.RequestedAddressAnnotation: "10.80.6.7"})
	})
	Eventually(addressOf("shared", "wants-7")).Should(Equal("10.80.6.7"))
	createClaim(t, "shared", "wants-1", "claims-shared", func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{capi.RequestedAddressAnnotation: "10.80.6.1"})
	})
	Eventually(readiness("shared", "wants-1")).Should(Equal(
		"False AllocationFailed: annotation ipAddress=10.80.6.1: in use ('kubectl nodeippool show claims-shared' names its holder)"))
	createClaim(t, "shared", "wants-3", "claims-shared", func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{capi.RequestedAddressAnnotation: "10.80.6.3"})
	})
	Eventually(readiness("shared", "wants-3")).Should(Equal(
		"False AllocationFailed: annotation ipAddress=10.80.6.3: reserved in NodeIPPool claims-shared for node somenode"))

	// A node's record of the claim's address is a collision, and says whose.
	recordByNode(t, "sharednode02.p", "claims-shared", "10.80.6.7")
	Eventually(available("claims-shared")).Should(And(HavePrefix("False IPCollision"), ContainSubstring("IPAddressClaim shared/wants-7")))
}

// TestRebuildKeepsClaims: a pool whose status is emptied by hand is
// rebuilt from the claims' IPAddresses as from enactments: their
// addresses are held again, and a new claim gets another one.
func TestRebuildKeepsClaims(t *testing.T) {
	begin(t, "rebuilt", "claims-rebuilt", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.7.0/24", Start: "10.80.7.1", End: "10.80.7.9"}})
	createClaim(t, "rebuilt", "a", "claims-rebuilt")
	createClaim(t, "rebuilt", "b", "claims-rebuilt")
	Eventually(bits("claims-rebuilt")).Should(HaveLen(2))
	held := bits("claims-rebuilt")()

	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "claims-rebuilt"}, &p); err != nil {
			return err
		}
		p.Status = ippoolv1.NodeIPPoolStatus{Conditions: p.Status.Conditions}
		return k.Status().Update(ctx, &p)
	})).To(Succeed())
	Eventually(bits("claims-rebuilt")).Should(Equal(held))
	Eventually(available("claims-rebuilt")).Should(HavePrefix("True"))

	createClaim(t, "rebuilt", "c", "claims-rebuilt")
	Eventually(addressOf("rebuilt", "c")).Should(Equal("10.80.7.3"))
}

// TestRangeChangeNamesClaims: the webhook refuses to shrink a range below
// an address a claim holds, and names the claim.
func TestRangeChangeNamesClaims(t *testing.T) {
	begin(t, "webhook", "claims-webhook", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.8.0/24", Start: "10.80.8.1", End: "10.80.8.9"}})
	createClaim(t, "webhook", "m1", "claims-webhook")
	Eventually(addressOf("webhook", "m1")).Should(Equal("10.80.8.1"))
	// On the latest copy, as kubectl edit would: the provider writes the
	// pool's status meanwhile.
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "claims-webhook"}, &p); err != nil {
			return err
		}
		p.Spec.Range.Start = "10.80.8.2"
		return k.Update(ctx, &p)
	})).To(MatchError(ContainSubstring("10.80.8.1 held by IPAddressClaim webhook/m1")))
}

// TestRestoreSurvivesARestart: a provider stopped after it let an
// IPAddress go, its in-flight entry gone, takes the same address back from
// the claim's restore annotation, and removes the annotation.
func TestRestoreSurvivesARestart(t *testing.T) {
	pc := begin(t, "restart", "claims-restart", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.9.0/24", Start: "10.80.9.1", End: "10.80.9.9"}})
	createClaim(t, "restart", "first", "claims-restart")
	Eventually(addressOf("restart", "first")).Should(Equal("10.80.9.1"))
	createClaim(t, "restart", "m1", "claims-restart")
	Eventually(addressOf("restart", "m1")).Should(Equal("10.80.9.2"))
	Expect(pc.Stop()).To(Succeed())

	// As restore leaves things when the process dies after letting go.
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := capi.NewClaim(version)
		if err := k.Get(ctx, types.NamespacedName{Namespace: "restart", Name: "m1"}, c); err != nil {
			return err
		}
		c.SetAnnotations(map[string]string{capi.RestoreAnnotation: "10.80.9.2"})
		return k.Update(ctx, c)
	})).To(Succeed())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a, err := getAddress("restart", "m1")
		if err != nil {
			return err
		}
		a.SetFinalizers(nil)
		return k.Update(ctx, a)
	})).To(Succeed())
	a, err := getAddress("restart", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(k.Delete(ctx, a)).To(Succeed())
	// Someone else asks meanwhile: the next free address is not the one
	// being restored, whose bit stays set.
	createClaim(t, "restart", "other", "claims-restart")

	startController(t)
	Eventually(addressOf("restart", "m1")).Should(Equal("10.80.9.2"))
	Eventually(addressOf("restart", "other")).Should(Equal("10.80.9.3"))
	Eventually(func() map[string]string {
		c := capi.NewClaim(version)
		_ = k.Get(ctx, types.NamespacedName{Namespace: "restart", Name: "m1"}, c)
		return c.GetAnnotations()
	}).ShouldNot(HaveKey(capi.RestoreAnnotation))
}

// TestOrphanedAddressReleased: the IPAddress of a claim that went without
// its release (its finalizer removed by hand while the provider was down)
// is released when the provider sees it: quarantined, deleted, and its
// address freed.
func TestOrphanedAddressReleased(t *testing.T) {
	pc := begin(t, "orphan", "claims-orphan", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.10.0/24", Start: "10.80.10.1", End: "10.80.10.9"}})
	createClaim(t, "orphan", "m1", "claims-orphan")
	Eventually(addressOf("orphan", "m1")).Should(Equal("10.80.10.1"))
	Expect(pc.Stop()).To(Succeed())

	Expect(k.Delete(ctx, newClaim("orphan", "m1", "claims-orphan"))).To(Succeed())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := capi.NewClaim(version)
		if err := k.Get(ctx, types.NamespacedName{Namespace: "orphan", Name: "m1"}, c); err != nil {
			return err
		}
		c.SetFinalizers(nil)
		return k.Update(ctx, c)
	})).To(Succeed())

	startController(t)
	Eventually(func() error { _, err := getAddress("orphan", "m1"); return err }).Should(MatchError(ContainSubstring("not found")))
	Eventually(bits("claims-orphan")).Should(BeEmpty())
}

// TestIPv6Claim: a claim of an IPv6 pool gets its address with the
// pool's prefix length, and the next claim the next address.
func TestIPv6Claim(t *testing.T) {
	begin(t, "six", "claims-six", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "fd00:80::/64", Start: "fd00:80::10"}, Gateway: "fd00:80::1"})
	createClaim(t, "six", "m1", "claims-six")
	Eventually(readiness("six", "m1")).Should(Equal("True AddressAllocated: fd00:80::10/64 from NodeIPPool claims-six"))
	createClaim(t, "six", "m2", "claims-six")
	Eventually(addressOf("six", "m2")).Should(Equal("fd00:80::11"))
	a, err := getAddress("six", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(a.Object["spec"]).To(HaveKeyWithValue("prefix", int64(64)))
	Expect(a.Object["spec"]).To(HaveKeyWithValue("gateway", "fd00:80::1"))
}

// TestRestoreHoldsItsAddress: an IPAddress deleted by hand whose
// re-creation keeps failing (each create stalls past the grace period,
// then is refused) keeps its address held for its claim: the machine that
// was given it still carries it. Other claims asking meanwhile get other
// addresses, or wait; before, the in-flight entry of the restore was
// forgotten while the pass stalled, garbage collection freed the address,
// and the next claim got it while the first machine kept it.
func TestRestoreHoldsItsAddress(t *testing.T) {
	var refuse atomic.Bool
	startStalling(t, 3*grace, refuse.Load, refuse.Load)
	createNamespace(t, "held")
	createPool(t, "claims-held", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.12.0/24", Start: "10.80.12.1", End: "10.80.12.2"}})
	createClaim(t, "held", "m1", "claims-held")
	Eventually(addressOf("held", "m1")).Should(Equal("10.80.12.1"))

	refuse.Store(true)
	before, err := getAddress("held", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(k.Delete(ctx, before)).To(Succeed())
	Eventually(func() error { _, err := getAddress("held", "m1"); return err }).Should(MatchError(ContainSubstring("not found")))
	createClaim(t, "held", "m2", "claims-held")
	Eventually(addressOf("held", "m2")).Should(Equal("10.80.12.2"))
	createClaim(t, "held", "m3", "claims-held")
	Eventually(readiness("held", "m3")).Should(HavePrefix("False PoolExhausted"))
	// Long past the grace period of the restore's entry and of garbage
	// collection: the address stays m1's.
	Consistently(readiness("held", "m3"), 5*grace, 200*time.Millisecond).Should(HavePrefix("False PoolExhausted"))
	Expect(bits("claims-held")()).To(ConsistOf("10.80.12.1", "10.80.12.2"))

	refuse.Store(false)
	Eventually(addressOf("held", "m1")).Should(Equal("10.80.12.1"))
	Expect(readiness("held", "m3")()).To(HavePrefix("False PoolExhausted"))
}

// TestPoolDeletedWhileAClaimRestores: a pool deleted while a claim's
// IPAddress is being restored. The restore's in-flight entry holds the
// pool until it is recorded; the claim takes the address its entry holds,
// even from a pool being deleted, its IPAddress is created, and the pool
// goes. Before, the claim was refused as the pool was being deleted, and
// the pool waited for the entry: neither ever moved.
func TestPoolDeletedWhileAClaimRestores(t *testing.T) {
	var refuse atomic.Bool
	startStalling(t, 0, func() bool { return false }, refuse.Load)
	createNamespace(t, "restoring")
	createPool(t, "claims-restoring", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.13.0/24", Start: "10.80.13.1", End: "10.80.13.2"}})
	createClaim(t, "restoring", "m1", "claims-restoring")
	Eventually(addressOf("restoring", "m1")).Should(Equal("10.80.13.1"))

	refuse.Store(true)
	before, err := getAddress("restoring", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(k.Delete(ctx, before)).To(Succeed())
	Eventually(func() []ippoolv1.InFlightAddress {
		var p ippoolv1.NodeIPPool
		_ = k.Get(ctx, types.NamespacedName{Name: "claims-restoring"}, &p)
		return p.Status.InFlight
	}).Should(HaveLen(1),
		"the restore holds the address in flight")
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "claims-restoring"}}
	Expect(k.Delete(ctx, pool)).To(Succeed())
	Consistently(func() error { return k.Get(ctx, client.ObjectKeyFromObject(pool), pool) }, 2*time.Second).Should(Succeed(),
		"held by the entry")

	refuse.Store(false)
	Eventually(addressOf("restoring", "m1")).Should(Equal("10.80.13.1"), "restored from the pool being deleted")
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(pool), pool)) }).Should(BeTrue(),
		"the pool goes once the entry is recorded")
}

// TestReleaseWaitsForItsQuarantine: a claim deleted while its address
// cannot be quarantined (the pool's status writes fail) keeps its
// IPAddress, and so its record of the address, and its finalizer; once
// the quarantine is written, the IPAddress and the claim go, and the
// quarantine keeps the address from everyone while its machine carries it.
func TestReleaseWaitsForItsQuarantine(t *testing.T) {
	RegisterTestingT(t)
	var fault envtest.PoolWriteFault
	pc := startController(t, func(pc *envtest.PoolController) { pc.Claims.Pools = envtest.FailingPoolWrites(pc.Claims.Pools, &fault) })
	createNamespace(t, "waits")
	createPool(t, "claims-waits", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.15.0/24", Start: "10.80.15.1", End: "10.80.15.9"}})
	createClaim(t, "waits", "m1", "claims-waits")
	Eventually(addressOf("waits", "m1")).Should(Equal("10.80.15.1"))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "claimnode02"}}
	Expect(k.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, node) })
	publishState(t, pc, "claimnode02", `{"interfaces":[{"name":"eth0","ipv4":{"address":[{"ip":"10.80.15.1","prefix-length":24}]}}]}`, time.Now())

	fault.On.Store(true)
	Expect(k.Delete(ctx, newClaim("waits", "m1", "claims-waits"))).To(Succeed())
	Eventually(fault.Refused.Load).Should(BeNumerically(">", 0), "the release tried to quarantine")
	Consistently(func() error { _, err := getAddress("waits", "m1"); return err }, 2*time.Second).Should(Succeed(),
		"the IPAddress stays while its address cannot be quarantined")
	Expect(k.Get(ctx, types.NamespacedName{Namespace: "waits", Name: "m1"}, capi.NewClaim(version))).To(Succeed())
	Expect(quarantined("claims-waits")()).To(BeEmpty())
	Expect(bits("claims-waits")()).To(Equal([]string{"10.80.15.1"}))

	fault.On.Store(false)
	Eventually(func() error {
		return k.Get(ctx, types.NamespacedName{Namespace: "waits", Name: "m1"}, capi.NewClaim(version))
	}).Should(MatchError(ContainSubstring("not found")))
	_, err := getAddress("waits", "m1")
	Expect(err).To(MatchError(ContainSubstring("not found")))
	Expect(quarantined("claims-waits")()).To(Equal([]string{"10.80.15.1 claimnode02"}))
}

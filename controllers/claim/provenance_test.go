package claim_test

import (
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestUnrecognizedIPAddressesHoldNothing: IPAddresses naming a pool that
// the provider did not make for a claim — made with the token of a tenant
// who may do anything in their namespace, where the install's admission
// policy is not (this control plane has none) — a tenant's, naming a node's
// address and a free one, and one made ahead of the provider for the
// tenant's own claim, naming the node's address — never put the pool into
// IPCollision, never give a claim a node's address, and are named by the
// pool's IPAddressesRecognized condition and a Warning Event. The free
// address one names is not handed out while it exists; once they are
// deleted the condition is True again and the address is freed.
func TestUnrecognizedIPAddressesHoldNothing(t *testing.T) {
	const pool = "claims-unrecognized"
	begin(t, "forger", pool, ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.30.0/24", Start: "10.80.30.1", End: "10.80.30.9"}})
	recordByNode(t, "n1.static", pool, "10.80.30.2") // unlabelled: its node is "?"
	Eventually(bits(pool)).Should(Equal([]string{"10.80.30.2"}))

	asTenant := tenantClient(t, "forger")
	forge(t, asTenant, "forger", "steal", pool, "10.80.30.2", nil)
	forge(t, asTenant, "forger", "squat", pool, "10.80.30.1", nil)
	Eventually(poolCondition(pool, ippoolv1.ConditionIPAddressesRecognized)).Should(And(HavePrefix("False UnrecognizedIPAddress: "),
		ContainSubstring("IPAddress forger/squat (not made by this provider for a claim) names 10.80.30.1 (to remove it: kubectl -n forger delete ipaddress squat)"),
		ContainSubstring("IPAddress forger/steal (not made by this provider for a claim) names 10.80.30.2, held by node ? (enactment n1.static)")))
	Expect(available(pool)()).To(HavePrefix("True ReconciledPool"), "an unrecognized IPAddress never collides")
	Eventually(events("NodeIPPool", "", pool)).Should(ContainElement(HavePrefix("UnrecognizedIPAddress: ")))

	t.Log("a claim gets neither the node's address nor the one an IPAddress names")
	createClaim(t, "forger", "m1", pool)
	Eventually(addressOf("forger", "m1")).Should(Equal("10.80.30.3"))

	t.Log("an IPAddress made ahead of the provider for the tenant's own claim, naming the node's address, is not adopted")
	paused := createClaim(t, "forger", "m2", pool, func(c *unstructured.Unstructured) {
		c.SetAnnotations(map[string]string{capi.PausedAnnotation: ""})
	})
	forge(t, asTenant, "forger", "m2", pool, "10.80.30.2", paused)
	unpause(t, "forger", "m2")
	Eventually(readiness("forger", "m2")).Should(Equal("False AllocationFailed: IPAddress forger/m2 names 10.80.30.2, and node ? " +
		"(enactment n1.static) holds it; it was not made by this provider for this claim (no valid nmstate.io/ippool-provenance " +
		"annotation), so it is not adopted: delete it, and the claim is given an address"))
	Expect(available(pool)()).To(HavePrefix("True ReconciledPool"))
	Expect(bits(pool)()).To(Equal([]string{"10.80.30.1", "10.80.30.2", "10.80.30.3"}))

	t.Log("deleting the tenant's: the squatted address is freed once garbage collection's grace is over")
	for _, name := range []string{"steal", "squat"} {
		Expect(k.Delete(ctx, forged("forger", name))).To(Succeed())
	}
	Eventually(bits(pool)).Should(Equal([]string{"10.80.30.2", "10.80.30.3"}))

	t.Log("deleting the one made for m2: it is let go, not restored with the node's address; the condition clears, and m2 is served")
	Expect(k.Delete(ctx, forged("forger", "m2"))).To(Succeed())
	Eventually(poolCondition(pool, ippoolv1.ConditionIPAddressesRecognized)).Should(HavePrefix("True IPAddressesRecognized"))
	Eventually(addressOf("forger", "m2")).Should(Equal("10.80.30.1"))
	Eventually(readiness("forger", "m2")).Should(HavePrefix("True AddressAllocated"))
}

// TestRestoredIPAddressAdopted: a claim and its IPAddress restored from a
// backup the way Velero restores them — without owner references or
// finalizers, the claim with a new UID — while the provider is down: while
// a tenant's IPAddress names the same address the claim adopts nothing;
// once it is gone the claim adopts its IPAddress (same address, nothing
// renumbered), signs it again, and says so in an Event; meanwhile the pool
// never collides.
func TestRestoredIPAddressAdopted(t *testing.T) {
	const pool = "claims-restored"
	pc := begin(t, "from-backup", pool, ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.31.0/24", Start: "10.80.31.1", End: "10.80.31.9"}})
	createClaim(t, "from-backup", "m0", pool)
	Eventually(addressOf("from-backup", "m0")).Should(Equal("10.80.31.1"))
	createClaim(t, "from-backup", "m1", pool)
	Eventually(addressOf("from-backup", "m1")).Should(Equal("10.80.31.2"))
	before, err := getAddress("from-backup", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(before.GetAnnotations()).To(HaveKey(capi.ProvenanceAnnotation))
	Expect(pc.Stop()).To(Succeed())

	t.Log("the claim and its IPAddress lost and restored from a backup")
	backup := before.DeepCopy()
	for _, o := range []*unstructured.Unstructured{capi.NewClaim(version), capi.NewAddress(version)} {
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k.Get(ctx, types.NamespacedName{Namespace: "from-backup", Name: "m1"}, o); err != nil {
				return err
			}
			o.SetFinalizers(nil)
			return k.Update(ctx, o)
		})).To(Succeed())
		Expect(k.Delete(ctx, o)).To(Succeed())
	}
	restoredAddr := capi.NewAddress(version)
	restoredAddr.SetNamespace("from-backup")
	restoredAddr.SetName("m1")
	restoredAddr.SetAnnotations(backup.GetAnnotations()) // Velero keeps annotations, drops owners and finalizers
	restoredAddr.Object["spec"] = backup.Object["spec"]
	Eventually(func() error { return k.Create(ctx, restoredAddr) }).Should(Succeed())
	createClaim(t, "from-backup", "m1", pool)
	// Meanwhile a tenant names the same address in an IPAddress of its own:
	// which of the two is m1's is not known, so neither is adopted.
	forge(t, tenantClient(t, "from-backup"), "from-backup", "squatter", pool, "10.80.31.2", nil)

	startController(t)
	Eventually(readiness("from-backup", "m1")).Should(Equal("False AllocationFailed: IPAddress from-backup/m1 names 10.80.31.2, " +
		"and IPAddress from-backup/squatter (not made by this provider for a claim) names it too; it was not made by this " +
		"provider for this claim (no valid nmstate.io/ippool-provenance annotation), so it is not adopted: delete it, and the claim is given an address"))
	Expect(k.Delete(ctx, forged("from-backup", "squatter"))).To(Succeed())
	Eventually(func() bool {
		a, err := getAddress("from-backup", "m1")
		return err == nil && capi.ControllerClaimUID(a) != "" && capi.ControllerClaimUID(a) != capi.ControllerClaimUID(backup)
	}).Should(BeTrue(), "the restored claim owns its IPAddress")
	Eventually(readiness("from-backup", "m1")).Should(HavePrefix("True AddressAllocated: 10.80.31.2/24"))
	Expect(addressOf("from-backup", "m1")()).To(Equal("10.80.31.2"), "not renumbered")
	Eventually(events("IPAddressClaim", "from-backup", "m1")).Should(ContainElement(HavePrefix(
		"AddressAdopted: IPAddress from-backup/m1 (10.80.31.2) names this claim but was not signed by this provider for it")))
	// Set only if the pool controller saw the IPAddress before its claim
	// adopted it.
	Eventually(poolCondition(pool, ippoolv1.ConditionIPAddressesRecognized)).Should(Or(Equal("none"), HavePrefix("True IPAddressesRecognized")))
	Eventually(available(pool)).Should(HavePrefix("True ReconciledPool")) // after the rebuild of a controller's start
	Expect(bits(pool)()).To(Equal([]string{"10.80.31.1", "10.80.31.2"}))
	Expect(addressOf("from-backup", "m0")()).To(Equal("10.80.31.1"), "a claim the restore did not touch keeps its address and signature")
}

// forged returns an empty IPAddress to delete.
func forged(namespace, name string) *unstructured.Unstructured {
	a := capi.NewAddress(version)
	a.SetNamespace(namespace)
	a.SetName(name)
	return a
}

// forge creates with c, as a tenant may, an IPAddress of pool naming ip
// for the claim of its name, and deletes it when the test ends. Given an
// owner, it is made as the provider makes one: owned by that claim and
// protected by the provider's finalizer.
func forge(t *testing.T, c client.Client, namespace, name, pool, ip string, owner *unstructured.Unstructured) {
	t.Helper()
	a := forged(namespace, name)
	if owner != nil {
		a.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(),
			UID: owner.GetUID(), Controller: ptr.To(true)}})
		a.SetFinalizers([]string{capi.ProtectFinalizer})
	}
	a.Object["spec"] = map[string]any{"address": ip, "prefix": int64(24), "claimRef": map[string]any{"name": name},
		"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": pool}}
	Expect(c.Create(ctx, a)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, forged(namespace, name)) })
}

// tenantClient returns a client with the token of a service account that
// may do anything in namespace, and nothing elsewhere: a tenant.
func tenantClient(t *testing.T, namespace string) client.Client {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin", Namespace: namespace}}
	Expect(k.Create(ctx, sa)).To(Succeed())
	Expect(k.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}})).To(Succeed())
	Expect(k.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everything"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: namespace}}})).To(Succeed())
	cs, err := kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(envtest.BearerConfig(env.Config, tr.Status.Token), client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// unpause removes the paused annotation from a claim.
func unpause(t *testing.T, namespace, name string) {
	t.Helper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := capi.NewClaim(version)
		if err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
			return err
		}
		c.SetAnnotations(nil)
		return k.Update(ctx, c)
	})).To(Succeed())
}

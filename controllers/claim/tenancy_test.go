package claim_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// TestClaimNamespaceSelector: a pool whose claimNamespaceSelector does not
// select a claim's namespace gives it no address — Ready=False
// NamespaceNotAllowed naming the pool, its rule and the namespace, and a
// Warning Event — and serves it once the namespace is labelled to match.
// A claim that holds an address keeps it when the selector narrows; a
// pool without a selector serves every namespace.
func TestClaimNamespaceSelector(t *testing.T) {
	begin(t, "tenant-a", "claims-tenancy", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.9.0/24", Start: "10.80.9.1", End: "10.80.9.9"},
		ClaimNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ipam.example.com/tenant": "yes"}}})
	label(t, "tenant-a", "yes")
	createNamespace(t, "tenant-b")
	createNamespace(t, "tenant-c")
	createClaim(t, "tenant-a", "m1", "claims-tenancy")
	createClaimAs(t, tenantClient(t, "tenant-b"), "tenant-b", "m2", "claims-tenancy") // with a tenant's token

	Eventually(addressOf("tenant-a", "m1")).Should(Equal("10.80.9.1"))
	refusal := "False NamespaceNotAllowed: NodeIPPool claims-tenancy serves claims only from namespaces that match its " +
		"spec.claimNamespaceSelector (ipam.example.com/tenant=yes), and namespace tenant-b does not: claim from another pool, " +
		"or have the pool's admin widen the selector or label the namespace"
	Eventually(readiness("tenant-b", "m2")).Should(Equal(refusal))
	Eventually(events("IPAddressClaim", "tenant-b", "m2")).Should(ContainElement(HavePrefix("NamespaceNotAllowed: NodeIPPool claims-tenancy")))
	Consistently(addressOf("tenant-b", "m2"), time.Second).Should(ContainSubstring("not found"), "no IPAddress for a refused claim")
	Expect(bits("claims-tenancy")()).To(Equal([]string{"10.80.9.1"}), "no address taken for a refused claim")

	t.Log("labelling the namespace: the waiting claim is served")
	label(t, "tenant-b", "yes")
	Eventually(addressOf("tenant-b", "m2")).Should(Equal("10.80.9.2"))

	t.Log("narrowing the selector to tenant-b: tenant-a keeps its address, a new claim there is refused")
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "claims-tenancy"}, &p); err != nil {
			return err
		}
		p.Spec.ClaimNamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"tenant-b"}}}}
		return k.Update(ctx, &p)
	})).To(Succeed())
	createClaim(t, "tenant-a", "m3", "claims-tenancy")
	Eventually(readiness("tenant-a", "m3")).Should(HavePrefix("False NamespaceNotAllowed: NodeIPPool claims-tenancy serves claims only " +
		"from namespaces that match its spec.claimNamespaceSelector (kubernetes.io/metadata.name in (tenant-b)), and namespace tenant-a does not"))
	Consistently(addressOf("tenant-a", "m1"), time.Second).Should(Equal("10.80.9.1"))
	Expect(readiness("tenant-a", "m1")()).To(HavePrefix("True AddressAllocated"))

	t.Log("a pool without a selector serves every namespace")
	createPool(t, "claims-anyone", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.10.0/24", Start: "10.80.10.1", End: "10.80.10.9"}})
	createClaim(t, "tenant-c", "m4", "claims-anyone")
	Eventually(addressOf("tenant-c", "m4")).Should(Equal("10.80.10.1"))
}

// label sets the test's tenant label on a namespace.
func label(t *testing.T, namespace, value string) {
	t.Helper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var ns corev1.Namespace
		if err := k.Get(ctx, types.NamespacedName{Name: namespace}, &ns); err != nil {
			return err
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels["ipam.example.com/tenant"] = value
		return k.Update(ctx, &ns)
	})).To(Succeed())
}

// TestRestoreAnnotationIsNoWayIn: the annotation with which the provider
// restores a deleted IPAddress is, on a claim it never served, only its
// author's word: it neither takes an address another holder records (a
// node's here: it would be on two NICs) nor passes the pool's namespace
// selector. The claims are written with the token of a tenant who may do
// anything in their namespace.
func TestRestoreAnnotationIsNoWayIn(t *testing.T) {
	begin(t, "restore-forged", "claims-forged", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.11.0/24", Start: "10.80.11.1", End: "10.80.11.9"}})
	recordByNode(t, "forgednode.p", "claims-forged", "10.80.11.1")
	Eventually(bits("claims-forged")).Should(ContainElement("10.80.11.1"))
	forge := func(ip string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{capi.RestoreAnnotation: ip}) }
	}
	asTenant := tenantClient(t, "restore-forged")
	createClaimAs(t, asTenant, "restore-forged", "taker", "claims-forged", forge("10.80.11.1"))
	Eventually(readiness("restore-forged", "taker")).Should(HavePrefix("False AllocationFailed: annotation " + capi.RestoreAnnotation +
		"=10.80.11.1: "))
	Expect(readiness("restore-forged", "taker")()).To(ContainSubstring("holds that address of NodeIPPool claims-forged: remove the annotation to take another one"))
	Consistently(addressOf("restore-forged", "taker"), time.Second).Should(ContainSubstring("not found"))

	createPool(t, "claims-forged-closed", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.12.0/24", Start: "10.80.12.1", End: "10.80.12.9"},
		ClaimNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ipam.example.com/tenant": "yes"}}})
	createClaimAs(t, asTenant, "restore-forged", "sneaker", "claims-forged-closed", forge("10.80.12.5"))
	Eventually(readiness("restore-forged", "sneaker")).Should(HavePrefix("False NamespaceNotAllowed: NodeIPPool claims-forged-closed"))
	Consistently(addressOf("restore-forged", "sneaker"), time.Second).Should(ContainSubstring("not found"))
}

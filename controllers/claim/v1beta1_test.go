package claim_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestV1Beta1Cluster: on a control plane that serves the IPAM CRDs at
// v1beta1 only (Cluster API up to 1.10), the provider speaks v1beta1: a
// claim is served with v1beta1's conditions (a severity when not True),
// refused when the pool is full, and released.
func TestV1Beta1Cluster(t *testing.T) {
	RegisterTestingT(t)
	old, err := envtest.Start(envtest.WithClusterAPIAt("v1beta1"))
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = old.Stop() })
	c, err := envtest.ClientFor(old.Config)
	Expect(err).NotTo(HaveOccurred())
	pc, err := old.StartPoolController(grace, nil)
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	Expect(pc.Claims).NotTo(BeNil())
	Expect(pc.Claims.Version).To(Equal("v1beta1"))

	Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old"}})).To(Succeed())
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.82.0.0/30"}, Gateway: "10.82.0.2"}}
	Expect(c.Create(ctx, pool)).To(Succeed())
	claimOf := func(name string) *unstructured.Unstructured {
		u := capi.NewClaim("v1beta1")
		u.SetNamespace("old")
		u.SetName(name)
		u.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "old"}}
		return u
	}
	ready := func(name string) func() map[string]any {
		return func() map[string]any {
			u := capi.NewClaim("v1beta1")
			if err := c.Get(ctx, types.NamespacedName{Namespace: "old", Name: name}, u); err != nil {
				return map[string]any{"error": err.Error()}
			}
			list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, item := range list {
				if m, ok := item.(map[string]any); ok && m["type"] == capi.ConditionReady {
					delete(m, "lastTransitionTime")
					return m
				}
			}
			return nil
		}
	}
	Expect(c.Create(ctx, claimOf("m1"))).To(Succeed())
	Eventually(ready("m1")).Should(Equal(map[string]any{"type": "Ready", "status": "True", "reason": "AddressAllocated",
		"message": "10.82.0.1/30 from NodeIPPool old"}))
	a := capi.NewAddress("v1beta1")
	Expect(c.Get(ctx, types.NamespacedName{Namespace: "old", Name: "m1"}, a)).To(Succeed())
	Expect(a.Object["spec"]).To(Equal(map[string]any{"address": "10.82.0.1", "prefix": int64(30), "gateway": "10.82.0.2",
		"claimRef": map[string]any{"name": "m1"}, "poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "old"}}))

	// 10.82.0.2 is the gateway: the pool has no other address.
	Expect(c.Create(ctx, claimOf("m2"))).To(Succeed())
	Eventually(ready("m2")).Should(And(HaveKeyWithValue("severity", "Error"), HaveKeyWithValue("reason", "PoolExhausted")))

	Expect(c.Delete(ctx, claimOf("m1"))).To(Succeed())
	Eventually(ready("m2")).Should(HaveKeyWithValue("status", "True"))
	Expect(c.Get(ctx, types.NamespacedName{Namespace: "old", Name: "m2"}, a)).To(Succeed())
	Expect(capi.AddressOf(a).IP.String()).To(Equal("10.82.0.1"))
	Eventually(func() bool {
		var p ippoolv1.NodeIPPool
		_ = c.Get(ctx, client.ObjectKeyFromObject(pool), &p)
		cond := meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionAvailable)
		return cond != nil && p.Status.Allocated == 1
	}).Should(BeTrue())
}

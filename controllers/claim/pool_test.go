package claim_test

import (
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// TestPoolRecreatedUnderClaims: a pool deleted while claims hold its
// addresses goes (a claim's IPAddress does not hold it), and the claims
// keep their IPAddresses. Created again over another range, the pool
// holds the address of a claim its range still hands out, so no other
// claim gets it; a claim whose address the range no longer hands out keeps
// it too (an IPAddress never changes; its machine carries it), and the
// pool says so.
func TestPoolRecreatedUnderClaims(t *testing.T) {
	const pool = "claims-recreated"
	begin(t, "recreated", pool, ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.14.0/24", Start: "10.80.14.1", End: "10.80.14.2"}})
	createClaim(t, "recreated", "m1", pool)
	Eventually(addressOf("recreated", "m1")).Should(Equal("10.80.14.1"))
	createClaim(t, "recreated", "m2", pool)
	Eventually(addressOf("recreated", "m2")).Should(Equal("10.80.14.2"))
	m1, m2 := liveAddress("recreated", "m1")(), liveAddress("recreated", "m2")()

	old := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}
	Expect(k.Delete(ctx, old)).To(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(old), old)) }).Should(BeTrue(),
		"claims' IPAddresses do not hold a pool being deleted")

	createPool(t, pool, ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.14.0/24", Start: "10.80.14.2", End: "10.80.14.4"}})
	Eventually(bits(pool)).Should(ContainElement("10.80.14.2"), "the new pool holds the address m2 still has")
	createClaim(t, "recreated", "m3", pool)
	createClaim(t, "recreated", "m4", pool)
	Eventually(addressOf("recreated", "m3")).Should(BeElementOf("10.80.14.3", "10.80.14.4"))
	Eventually(addressOf("recreated", "m4")).Should(BeElementOf("10.80.14.3", "10.80.14.4"))
	Expect(addressOf("recreated", "m3")()).NotTo(Equal(addressOf("recreated", "m4")()))
	createClaim(t, "recreated", "m5", pool)
	Eventually(readiness("recreated", "m5")).Should(HavePrefix("False PoolExhausted"), "m2 keeps 10.80.14.2")

	Expect(liveAddress("recreated", "m1")()).To(Equal(m1), "m1 keeps its IPAddress, outside the new range")
	Expect(liveAddress("recreated", "m2")()).To(Equal(m2))
	Expect(readiness("recreated", "m1")()).To(HavePrefix("True"))
	Eventually(events("NodeIPPool", "default", pool)).Should(ContainElement(SatisfyAll(
		HavePrefix(ippoolv1.ReasonAddressOutsideRange), HaveSuffix("claims keep theirs, since an IPAddress never changes "+
			"(delete the claim, or its machine, for one of this range): 10.80.14.1 at IPAddressClaim recreated/m1"))))
}

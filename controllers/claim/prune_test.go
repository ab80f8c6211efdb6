package claim_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// TestClaimPrunesWhatItRecorded: a claim served after another takes the
// other's in-flight entry out of the pool in its own pool write, since
// the other's IPAddress records that address: a burst of claims does not
// carry every entry until the pool controller prunes them (it would after
// 10 seconds, or once 64 wait). Its own entry stays for the next write.
func TestClaimPrunesWhatItRecorded(t *testing.T) {
	begin(t, "pruned", "claims-pruned", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.9.0/24", Start: "10.80.9.10", End: "10.80.9.20"}})
	inFlight := func() []string {
		var p ippoolv1.NodeIPPool
		Expect(k.Get(ctx, types.NamespacedName{Name: "claims-pruned"}, &p)).To(Succeed())
		var out []string
		for _, e := range p.Status.InFlight {
			out = append(out, e.IP)
		}
		return out
	}
	createClaim(t, "pruned", "m1", "claims-pruned")
	first := time.Now()
	Eventually(readiness("pruned", "m1")).Should(HavePrefix("True"))
	createClaim(t, "pruned", "m2", "claims-pruned")
	Eventually(readiness("pruned", "m2")).Should(HavePrefix("True"))
	left := inFlight()
	if time.Since(first) > 8*time.Second {
		t.Skipf("the claims took %s: the pool controller may have pruned the entry itself", time.Since(first))
	}
	Expect(left).NotTo(ContainElement("10.80.9.10"), "m1's entry went with m2's write")
	Expect(bits("claims-pruned")()).To(ConsistOf("10.80.9.10", "10.80.9.11"))
}

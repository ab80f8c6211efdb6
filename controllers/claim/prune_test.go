package claim_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestClaimPrunesWhatItRecorded: a claim served after another takes the
// other's in-flight entry out of the pool in its own pool write, since
// the other's IPAddress records that address: a burst of claims does not
// carry every entry until the pool controller prunes them (it would after
// its PruneAfter, or once 64 wait; an hour here, so that only the claim's
// write can have pruned it). Its own entry stays for the next write.
func TestClaimPrunesWhatItRecorded(t *testing.T) {
	RegisterTestingT(t)
	startController(t, func(pc *envtest.PoolController) { pc.Pools.PruneAfter = time.Hour })
	createNamespace(t, "pruned")
	createPool(t, "claims-pruned", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.9.0/24", Start: "10.80.9.10", End: "10.80.9.20"}})
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
	Eventually(readiness("pruned", "m1")).Should(HavePrefix("True"))
	Expect(inFlight()).To(ContainElement("10.80.9.10"), "the pool controller does not prune within the hour")
	createClaim(t, "pruned", "m2", "claims-pruned")
	Eventually(readiness("pruned", "m2")).Should(HavePrefix("True"))
	Expect(inFlight()).NotTo(ContainElement("10.80.9.10"), "m1's entry went with m2's write")
	Expect(bits("claims-pruned")()).To(ConsistOf("10.80.9.10", "10.80.9.11"))
}

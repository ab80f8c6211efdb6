package claim_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestCascadingDeletions: a claim deleted with --cascade=foreground (the
// garbage collector deletes its IPAddress first, and keeps the claim until
// that is gone) or --cascade=orphan (it takes the claim's ownership off
// its IPAddress first) is released as a plain deletion is: its IPAddress
// goes, its address is free again (no node carries it), no IPAddress is
// made again for it, and the claim goes. envtest runs no garbage
// collector: the test plays it (envtest.Collect), racing the controller
// as it does.
func TestCascadingDeletions(t *testing.T) {
	begin(t, "cascade", "claims-cascade", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.11.0/24", Start: "10.80.11.1", End: "10.80.11.9"}})
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		name := strings.ToLower(string(policy))
		createClaim(t, "cascade", name, "claims-cascade")
		Eventually(addressOf("cascade", name)).Should(HavePrefix("10.80.11."), name)
		ip := addressOf("cascade", name)()
		Expect(bits("claims-cascade")()).To(ContainElement(ip))

		claim := newClaim("cascade", name, "claims-cascade")
		Expect(k.Delete(ctx, claim, client.PropagationPolicy(policy))).To(Succeed())
		Eventually(func() (bool, error) { return envtest.Collect(ctx, k, claim, capi.NewAddressList(version)) }).
			Should(BeTrue(), "%s: the claim goes", name)
		gone := func() error { _, err := getAddress("cascade", name); return err }
		Eventually(gone).Should(MatchError(ContainSubstring("not found")), "%s: its IPAddress goes", name)
		Consistently(gone, 2*time.Second).Should(MatchError(ContainSubstring("not found")), "%s: and is not made again", name)
		Eventually(bits("claims-cascade")).ShouldNot(ContainElement(ip), "%s: no node carries %s: free", name, ip)
		Expect(quarantined("claims-cascade")()).To(BeEmpty())
	}
}

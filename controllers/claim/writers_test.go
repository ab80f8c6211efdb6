package claim_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/claim"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestWhoWritesWhat keeps docs/protocol.md's tables of claims true: over
// a claim served, its IPAddress deleted by hand and restored, and the
// claim's deletion, every part of a claim or an
// IPAddress that the API server's managedFields show a writer setting is a
// part its table names, and that writer one its row names.
func TestWhoWritesWhat(t *testing.T) {
	begin(t, "writers", "claims-writers", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.9.0/24", Start: "10.80.9.1", End: "10.80.9.9"}})
	ours := func(o metav1.Object) bool { return o.GetNamespace() == "writers" }
	kinds := []struct {
		kind, header string
		list         client.ObjectList
	}{
		{capi.ClaimKind, "part of an IPAddressClaim", capi.NewClaimList(version)},
		{capi.AddressKind, "part of an IPAddress", capi.NewAddressList(version)},
	}
	watches := make([]*envtest.Writers, len(kinds))
	for i, kd := range kinds {
		ws, err := envtest.WatchWriters(ctx, env.Config, k.Scheme(), kd.list, ours)
		Expect(err).NotTo(HaveOccurred())
		watches[i] = ws
	}

	createClaim(t, "writers", "m1", "claims-writers", func(c *unstructured.Unstructured) {
		c.SetLabels(map[string]string{capi.ClusterNameLabel: "c1"})
	})
	Eventually(addressOf("writers", "m1")).Should(Equal("10.80.9.1"))
	before, err := getAddress("writers", "m1")
	Expect(err).NotTo(HaveOccurred())
	Expect(k.Delete(ctx, before)).To(Succeed())
	Eventually(liveAddress("writers", "m1")).ShouldNot(BeElementOf(types.UID(""), before.GetUID()), "restored")
	Expect(k.Delete(ctx, newClaim("writers", "m1", "claims-writers"))).To(Succeed())
	Eventually(func() error {
		return k.Get(ctx, types.NamespacedName{Namespace: "writers", Name: "m1"}, capi.NewClaim(version))
	}).Should(MatchError(ContainSubstring("not found")))

	for i, kd := range kinds {
		_, problems := watches[i].Check(kd.kind, kd.header, []string{"claim controller", "provider"}, func(m string) string {
			if m == claim.FieldOwner {
				return "claim controller"
			}
			return "provider"
		})
		for _, msg := range problems {
			t.Error(msg)
		}
	}
}

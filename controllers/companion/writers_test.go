package companion_test

import (
	"strings"
	"testing"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/companion"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestWhoWritesWhat keeps docs/protocol.md's tables of companion mode
// true: over a rollout to two nodes, a reset of one node and of the whole
// pooled policy, a Node deleted and the pooled policy's deletion, every
// part of a pooled policy, a generated policy or a Node that the API
// server's managedFields show a writer setting is a part its table names,
// and that writer one its row names.
func TestWhoWritesWhat(t *testing.T) {
	RegisterTestingT(t)
	ours := func(o metav1.Object) bool { return strings.HasPrefix(o.GetName(), "ww") }
	kinds := []struct {
		kind, header string
		list         client.ObjectList
	}{
		{"PooledNodeNetworkConfigurationPolicy", "part of a pooled policy", &ippoolv1.PooledNodeNetworkConfigurationPolicyList{}},
		{"generated NodeNetworkConfigurationPolicy", "part of a generated policy", &nmstatev1.NodeNetworkConfigurationPolicyList{}},
		{"Node", "part of a Node", &corev1.NodeList{}},
	}
	watches := make([]*envtest.Writers, len(kinds))
	for i, kd := range kinds {
		ws, err := envtest.WatchWriters(ctx, env.Config, k.Scheme(), kd.list, ours)
		Expect(err).NotTo(HaveOccurred())
		watches[i] = ws
	}

	rolledOut(t, asIs, "ww", "10.71.4.0/24", "10.71.4.10", "10.71.4.30", "ww-1", "ww-2")
	first := addressOf("ww", "ww-1")()
	annotate(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ww-ww-1"}}, "cmp-ww")
	Eventually(addressOf("ww", "ww-1")).ShouldNot(Or(Equal(first), BeEmpty()))
	second := addressOf("ww", "ww-2")()
	annotate(&ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ww"}}, "cmp-ww")
	Eventually(addressOf("ww", "ww-2")).ShouldNot(Or(Equal(second), BeEmpty()))
	Eventually(status("ww")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"), describe("ww"))
	deleteNode("ww-2")
	Eventually(node("ww-2")).Should(ContainSubstring("not found"))
	Expect(k.Delete(ctx, &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ww"}})).To(Succeed())
	Eventually(func() error {
		return k.Get(ctx, client.ObjectKey{Name: "ww"}, &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
	}).Should(MatchError(ContainSubstring("not found")))

	for i, kd := range kinds {
		_, problems := watches[i].Check(kd.kind, kd.header, companionWriters, companionWriterOf)
		for _, msg := range problems {
			t.Error(msg)
		}
	}
}

// companionWriters are the writers the tables of companion mode name.
var companionWriters = []string{"companion controller", "admin"}

// companionWriterOf names the writer whose field manager is m, as the
// tables do: anyone but the companion controller is an admin (the test
// writes as the admin, and as the kubelet of its simulated nodes).
func companionWriterOf(m string) string {
	if m == companion.FieldOwner {
		return "companion controller"
	}
	return "admin"
}

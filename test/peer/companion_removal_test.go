package peer

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// companionRemovalSpecs are the companion Describe's specs on taking
// addresses off: a pooled policy deleted with --cascade=orphan or
// --cascade=foreground, a removal that failed tried again.
func companionRemovalSpecs() {
	It("takes a node's addresses off when a pooled policy is deleted with --cascade=orphan: they belong to the pools", func() {
		eth2 := func() []string {
			return envtest.NewNode("node01", filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll("eth2")
		}
		// eth2 is node01's again once the pooled policy of the spec
		// before has taken its address off.
		Eventually(func() []string { return generatedOf("eth2-small") }).Should(BeEmpty())
		Expect(eth2()).To(BeEmpty())
		orphan := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "eth2-orphan"}}
		orphan.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node01"}
		orphan.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
		orphan.Spec.DesiredState = shared.NewState(strings.ReplaceAll(envtest.OneAddressState, "eth1", "eth2"))
		Expect(kc.Create(ctx, orphan)).To(Succeed())
		Eventually(eth2).Should(HaveLen(1))
		ip := strings.TrimSuffix(eth2()[0], "/24")
		Expect(kc.Delete(ctx, orphan, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
		Eventually(func() error {
			return kc.Get(ctx, client.ObjectKeyFromObject(orphan), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
		}).Should(MatchError(ContainSubstring("not found")))
		Expect(eth2()).To(BeEmpty(), "off the NIC before the pooled policy went")
		Expect(generatedOf("eth2-orphan")).To(BeEmpty(), "no policy left behind with a pool's address")
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(ip))
	})

	It("tries a removal that failed again once the node can apply it, and frees the address then", func() {
		ip := recordOf("node04")
		Expect(ip).NotTo(BeEmpty())
		// kubernetes-nmstate's handler on node04 fails every apply for a
		// while: the policy that takes the address off fails, its retries
		// spent.
		fail := filepath.Join(cdir, "nodes", "node04.yaml.fail")
		Expect(os.WriteFile(fail, []byte("apply: simulated failure of the node's network\n"), 0o600)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(fail) })
		deselect("node04")
		Eventually(statusOf, 3*time.Minute).Should(HavePrefix("Degraded FailedToConfigure: node node04 could not apply policy "+
			ippoolv1.NodePolicyName(name, "node04")), "the failed removal is said")
		Expect(carried("node04")).To(ConsistOf(ip+"/24"), "still on its NIC")
		Expect(envtest.PoolAddresses(ctx, kc, pool)).To(ContainElement(ip), "held until it is off")

		// The node can apply again; kubernetes-nmstate's handler never
		// applies a generation it gave up on by itself: the pool
		// controller writes the removal again.
		Expect(os.Remove(fail)).To(Succeed())
		Eventually(func() []string { return carried("node04") }, 3*time.Minute).Should(BeEmpty(), "taken off by the removal tried again")
		Eventually(generated).ShouldNot(ContainElement(ippoolv1.NodePolicyName(name, "node04")))
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(ip))
		Eventually(statusOf).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
	})

	It("takes every address off its NIC when the pooled policy is deleted with --cascade=foreground, before its policies go", func() {
		Expect(kc.Delete(ctx, pooled, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		Eventually(generated).Should(BeEmpty())
		for _, node := range []string{"node01", "node04"} {
			Expect(carried(node)).To(BeEmpty(), node)
		}
		Eventually(func() error {
			return kc.Get(ctx, client.ObjectKeyFromObject(pooled), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
		}).Should(MatchError(ContainSubstring("not found")))
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).Should(BeEmpty())
	})
}

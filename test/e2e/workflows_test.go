package e2e

import (
	"fmt"
	"slices"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var workers = []string{"node01", "node02", "node03"}

// addresses returns, by node, the addresses the policy's enactments record
// from pool, and fails unless each node holds exactly one and applied it on
// iface.
func addresses(policy, pool, iface string, nodes ...string) map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	for _, node := range nodes {
		Eventually(trueCondition(node, policy)).Should(HavePrefix("Available"), node)
		ips := held(node, policy, pool)
		Expect(ips).To(HaveLen(1), node)
		// The specs share the nodes, whose interfaces keep what earlier
		// specs configured (as a real node's would): look for this
		// spec's address among them.
		Eventually(func() []string { return configured(node, iface) }).Should(ContainElement(HavePrefix(ips[0]+"/")), node)
		out[node] = ips[0]
	}
	return out
}

var _ = Describe("Assign static addresses with a NodeIPPool", func() {
	It("gives every selected node its own address from the README's pool and applies it", func() {
		applySample("nodeippool.yaml", &ippoolv1.NodeIPPool{})
		applySample("nncp.yaml", &nmstatev1.NodeNetworkConfigurationPolicy{})
		policyAvailable("static-ip")
		got := addresses("static-ip", "traffic-1", "eth1", workers...)
		Expect(envtest.Distinct(got)).To(HaveLen(3))
		for _, ip := range got {
			Expect(ip).To(BeElementOf("10.10.10.1", "10.10.10.2", "10.10.10.3", "10.10.10.5", "10.10.10.6", "10.10.10.7"))
		}
		Expect(plugin("show", "traffic-1")).To(ContainSubstring("allocated  node01  eth1       static-ip  addr"))
		By("reading each node's NodeNetworkState")
		for node, ip := range got {
			Eventually(func() string {
				var nns nncev1beta1.NodeNetworkState
				if err := k.Get(ctx, types.NamespacedName{Name: node}, &nns); err != nil {
					return err.Error()
				}
				return string(nns.Status.CurrentState.Raw)
			}).Should(ContainSubstring(ip), node)
		}
	})
})

var _ = Describe("An exhausted NodeIPPool", func() {
	It("fails the node it cannot serve explicitly, and a pool re-created larger serves it and keeps every address", func() {
		createPool("small", ippoolv1.IPRange{CIDR: "10.40.0.0/24", Start: "10.40.0.1", End: "10.40.0.2"})
		createPolicy("exhaust", "small")
		var waiting string
		Eventually(func() []string {
			var failing []string
			for _, node := range workers {
				if c := trueCondition(node, "exhaust")(); c != "" && c[:7] == "Failing" {
					failing, waiting = append(failing, c), node
				}
			}
			return failing
		}).Should(ConsistOf(`Failing IPPoolExhausted: NodeIPPool "small" is exhausted: all 2 addresses are allocated and ` +
			`1 more are needed; grow its range in place (an earlier spec.range.start, a later end, or fewer excludes, within its CIDR; ` +
			`'kubectl nodeippool plan -f' shows the change), or free addresses; if the range already fills its CIDR, create a pool over a larger CIDR ` +
			`and point the policies at it`))
		Eventually(poolAvailable("small")).Should(Equal("False ExhaustedIPPool"))
		served := addresses("exhaust", "small", "eth1", slices.DeleteFunc(slices.Clone(workers), func(n string) bool { return n == waiting })...)

		By("re-creating the pool with a larger range")
		Expect(k.Delete(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "small"}})).To(Succeed())
		Eventually(func() []string { return names(&ippoolv1.NodeIPPoolList{}) }).ShouldNot(ContainElement("small"))
		createPool("small", ippoolv1.IPRange{CIDR: "10.40.0.0/24", Start: "10.40.0.1", End: "10.40.0.20"})
		policyAvailable("exhaust")
		after := addresses("exhaust", "small", "eth1", workers...)
		for node, ip := range served {
			Expect(after[node]).To(Equal(ip), "%s kept its address", node)
		}
		Eventually(poolAvailable("small")).Should(Equal("True ReconciledPool"))
	})
})

var _ = Describe("A policy deleted and re-created", func() {
	It("returns the addresses when deleted and allocates again when re-created", func() {
		createPool("recreate", ippoolv1.IPRange{CIDR: "10.41.0.0/24"})
		createPolicy("recreate", "recreate")
		policyAvailable("recreate")
		addresses("recreate", "recreate", "eth1", workers...)
		Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "recreate"}})).To(Succeed())
		Eventually(func() []string { return names(&nncev1beta1.NodeNetworkConfigurationEnactmentList{}) }).Should(BeEmpty())
		Eventually(func() []string { return poolBits("recreate") }).Should(BeEmpty())
		createPolicy("recreate", "recreate")
		policyAvailable("recreate")
		Expect(envtest.Distinct(addresses("recreate", "recreate", "eth1", workers...))).To(HaveLen(3))
	})
})

var _ = Describe("Scaling", func() {
	BeforeEach(func() {
		createPool("scale", ippoolv1.IPRange{CIDR: "10.42.0.0/24", Start: "10.42.0.1", End: "10.42.0.50"})
		createPolicy("scale", "scale")
		policyAvailable("scale")
		addresses("scale", "scale", "eth1", workers...)
	})

	It("up: a new node gets its own address", func() {
		localcluster("node", "add", "node04")
		DeferCleanup(func() { localcluster("node", "remove", "node04") })
		got := addresses("scale", "scale", "eth1", append(workers, "node04")...)
		Expect(envtest.Distinct(got)).To(HaveLen(4))
		policyAvailable("scale")
	})

	for _, crash := range []bool{false, true} {
		It(fmt.Sprintf("down (crash: %v): a removed node's address is free again at once, kept for its return, and a new node gets another", crash), func() {
			node := map[bool]string{false: "node05", true: "node06"}[crash]
			// Start from a settled pool: an address quarantined by an earlier
			// step and freed later would be lower than the one freed here.
			Eventually(func() ([]string, error) { return envtest.EntryAddresses(ctx, k, "scale") }).Should(BeEmpty())
			localcluster("node", "add", node)
			ip := addresses("scale", "scale", "eth1", node)[node]
			args := []string{"node", "remove", node}
			if crash {
				args = append(args, "--crash")
			}
			localcluster(args...)
			Eventually(func() *nncev1beta1.NodeNetworkConfigurationEnactment { return enactment(node, "scale") }).Should(BeNil())
			Eventually(func() []string { return poolBits("scale") }).ShouldNot(ContainElement(ip))
			Expect(kept("scale")).To(ContainElement(ip))
			next := node + "-next"
			localcluster("node", "add", next)
			DeferCleanup(func() { localcluster("node", "remove", next) })
			Expect(addresses("scale", "scale", "eth1", next)[next]).NotTo(Equal(ip), "passed by while other addresses are free")
		})
	}

	It("replace: a node removed and re-added under its name within the quarantine period gets its address back", func() {
		const node = "node07"
		localcluster("node", "add", node)
		ip := addresses("scale", "scale", "eth1", node)[node]
		localcluster("node", "remove", node)
		Eventually(func() *nncev1beta1.NodeNetworkConfigurationEnactment { return enactment(node, "scale") }).Should(BeNil())
		Eventually(func() []string { return kept("scale") }).Should(ContainElement(ip), "kept for the node's return")
		Expect(poolBits("scale")).NotTo(ContainElement(ip), "and free: the Node is gone, its network with it")
		localcluster("node", "add", node)
		DeferCleanup(func() { localcluster("node", "remove", node) })
		Expect(addresses("scale", "scale", "eth1", node)[node]).To(Equal(ip))
		Eventually(func() []string { return events("NodeNetworkConfigurationEnactment", node+".scale") }).Should(
			ContainElement(HavePrefix("AddressReturned: NodeIPPool scale returned " + ip)))
	})
})

var _ = Describe("Manual clean up with nmstate.io/reset-ippool", func() {
	It("rebuilds the pool, and drops the addresses of one enactment or of a whole policy so the handlers allocate again", func() {
		createPool("reset", ippoolv1.IPRange{CIDR: "10.43.0.0/24"})
		createPolicy("reset", "reset")
		policyAvailable("reset")
		before := addresses("reset", "reset", "eth1", workers...)

		By("resetting the pool")
		annotateReset(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "reset"}}, "")
		Eventually(poolAvailable("reset")).Should(Equal("True ReconciledPool"))
		Expect(addresses("reset", "reset", "eth1", workers...)).To(Equal(before))

		By("resetting node01's enactment")
		annotateReset(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "node01.reset"}}, "reset")
		Eventually(func() []string { return events("NodeNetworkConfigurationEnactment", "node01.reset") }).Should(
			ContainElement(HavePrefix("AddressesDropped: Dropped " + before["node01"])))
		// Only node01's addresses are dropped. node02 may have other Events
		// (an AddressNotAdopted for an address an earlier spec left on eth1).
		Expect(events("NodeNetworkConfigurationEnactment", "node02.reset")).NotTo(
			ContainElement(HavePrefix("AddressesDropped")))
		addresses("reset", "reset", "eth1", workers...)

		By("resetting the policy")
		annotateReset(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "reset"}}, "reset")
		for _, node := range workers[1:] {
			Eventually(func() []string { return events("NodeNetworkConfigurationEnactment", node+".reset") }).Should(
				ContainElement(HavePrefix("AddressesDropped: Dropped " + before[node])))
		}
		policyAvailable("reset")
		Expect(envtest.Distinct(addresses("reset", "reset", "eth1", workers...))).To(HaveLen(3))
	})
})

var _ = Describe("A handler restarted", func() {
	It("keeps every address, and neither writes the pool nor re-applies", func() {
		createPool("sticky", ippoolv1.IPRange{CIDR: "10.44.0.0/24"})
		createPolicy("sticky", "sticky")
		policyAvailable("sticky")
		before := addresses("sticky", "sticky", "eth1", workers...)
		var pool ippoolv1.NodeIPPool
		Expect(k.Get(ctx, types.NamespacedName{Name: "sticky"}, &pool)).To(Succeed())
		enactments := map[string]string{}
		for _, node := range workers {
			enactments[node] = enactment(node, "sticky").ResourceVersion
		}

		localcluster("node", "restart", "node02")
		localcluster("node", "restart", "node03", "--crash")
		Consistently(func() map[string]string {
			now := map[string]string{}
			for _, node := range workers {
				now[node] = enactment(node, "sticky").ResourceVersion
			}
			return now
		}, 5*time.Second, time.Second).Should(Equal(enactments), "no enactment was written")
		var after ippoolv1.NodeIPPool
		Expect(k.Get(ctx, types.NamespacedName{Name: "sticky"}, &after)).To(Succeed())
		Expect(after.ResourceVersion).To(Equal(pool.ResourceVersion), "the pool was not written")
		Expect(addresses("sticky", "sticky", "eth1", workers...)).To(Equal(before))
	})
})

var _ = Describe("An IPv4 and an IPv6 pool on two interfaces", func() {
	It("gives every node one address of each family, on each interface", func() {
		createPool("v4", ippoolv1.IPRange{CIDR: "10.45.0.0/24", Start: "10.45.0.10", End: "10.45.0.20"})
		createPool("v6", ippoolv1.IPRange{CIDR: "fd00:45::/64", Start: "fd00:45::10", End: "fd00:45::ff", Exclude: []string{"fd00:45::11"}})
		createPolicyWith("dual", map[string]string{"v4": "ippool.v4.allocate", "v6": "ippool.v6.allocate"}, envtest.TwoFamiliesState)
		policyAvailable("dual")
		v4 := addresses("dual", "v4", "eth1", workers...)
		v6 := addresses("dual", "v6", "eth2", workers...)
		Expect(envtest.Distinct(v4)).To(HaveLen(3))
		Expect(envtest.Distinct(v6)).To(HaveLen(3))
		Expect(envtest.Distinct(v6)).NotTo(ContainElement("fd00:45::11"))
		for _, node := range workers {
			Expect(configured(node, "eth2")).To(ContainElement(v6[node] + "/64"))
		}
	})
})

package peer

import (
	"path/filepath"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// companionAddressSpecs are the companion Describe's specs on the addresses
// it hands out: a reset, a move to another NIC, a pool's gateway,
// reservations and growth.
func companionAddressSpecs() {
	It("gives a node a new address on a reset of its generated policy", func() {
		old := recordOf("node01")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var g nmstatev1.NodeNetworkConfigurationPolicy
			if err := kc.Get(ctx, types.NamespacedName{Name: ippoolv1.NodePolicyName(name, "node01")}, &g); err != nil {
				return err
			}
			g.Annotations[ippoolv1.ResetIPPoolAnnotation] = pool
			return kc.Update(ctx, &g)
		})).To(Succeed())
		Eventually(func() string { return recordOf("node01") }).ShouldNot(Or(BeEmpty(), Equal(old)))
		Eventually(func() []string { return carried("node01") }).Should(ConsistOf(recordOf("node01") + "/24"))
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(old))
	})

	It("moves a node's address with its template: kubernetes-nmstate's handler takes it off the old NIC as it puts it on the new one", func() {
		on := func(node, iface string) []string {
			return envtest.NewNode(node, filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll(iface)
		}
		move := func(from, to string) {
			GinkgoHelper()
			By("moving the template's address from " + from + " to " + to)
			Expect(envtest.Edit(ctx, kc, pooled, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
				p.Spec.DesiredState = shared.NewState(strings.Replace(companionState, "name: eth1", "name: "+to, 1))
			})).To(Succeed())
			selected := []string{"node01", "node04"}
			for _, node := range selected {
				ip := recordOf(node)
				Eventually(func() []string { return on(node, to) }).Should(ConsistOf(ip+"/24"), node)
				Expect(on(node, from)).To(BeEmpty(), "%s carries %s on two NICs", node, ip)
			}
			Eventually(func(g Gomega) {
				g.Expect(statusOf()).To(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
				for _, node := range selected {
					var p nmstatev1.NodeNetworkConfigurationPolicy
					g.Expect(kc.Get(ctx, types.NamespacedName{Name: ippoolv1.NodePolicyName(name, node)}, &p)).To(Succeed())
					g.Expect(string(p.Spec.DesiredState.Raw)).NotTo(ContainSubstring("name: "+from), "%s's policy kept the take-off", node)
					g.Expect(on(node, to)).To(ConsistOf(recordOf(node)+"/24"), node)
					g.Expect(on(node, from)).To(BeEmpty(), node)
				}
			}).Should(Succeed())
		}
		before := map[string]string{"node01": recordOf("node01"), "node04": recordOf("node04")}
		move("eth1", "eth3")
		move("eth3", "eth1")
		Expect(map[string]string{"node01": recordOf("node01"), "node04": recordOf("node04")}).To(Equal(before), "a move renumbers nothing")
		out, err := plugin("check")
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("writes the pool's gateway in, honours reservations, and waits on an exhausted pool until it grows", func() {
		spec := ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.73.0.0/24", Start: "10.73.0.10", End: "10.73.0.10"},
			Gateway: "10.73.0.1", Reservations: []ippoolv1.Reservation{{IP: "10.73.0.10", Node: "node04"}}}
		Expect(kc.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Spec: spec})).To(Succeed())
		second := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "eth2-small"}}
		second.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
		second.Spec.Capture = map[string]string{"addr": "ippool.small.allocate"}
		second.Spec.DesiredState = shared.NewState(`interfaces:
- name: eth2
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
routes:
  config:
  - destination: 203.0.113.0/24
    next-hop-address: "{{ capture.addr.gateway }}"
    next-hop-interface: eth2
`)
		Expect(kc.Create(ctx, second)).To(Succeed())
		DeferCleanup(func() { _ = kc.Delete(ctx, second) })
		condition := func() string { return statusIn(second.Name) }
		Eventually(condition).Should(HavePrefix("Degraded IPPoolExhausted: NodeIPPool small has no address left for node node01"))
		eth2 := func(node string) []string {
			return envtest.NewNode(node, filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll("eth2")
		}
		Eventually(func() []string { return eth2("node04") }).Should(ConsistOf("10.73.0.10/24"), "reserved for node04")

		By("growing the pool in place")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var pool ippoolv1.NodeIPPool
			if err := kc.Get(ctx, types.NamespacedName{Name: "small"}, &pool); err != nil {
				return err
			}
			pool.Spec.Range.End = "10.73.0.20"
			return kc.Update(ctx, &pool)
		})).To(Succeed())
		Eventually(condition).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
		Expect(eth2("node01")).To(ConsistOf("10.73.0.11/24"))
		var g nmstatev1.NodeNetworkConfigurationPolicy
		Expect(kc.Get(ctx, types.NamespacedName{Name: ippoolv1.NodePolicyName("eth2-small", "node01")}, &g)).To(Succeed())
		Expect(string(g.Spec.DesiredState.Raw)).To(ContainSubstring("next-hop-address: 10.73.0.1\n"), "the pool's gateway, written in")
		out, err := plugin("plan", "-f", writeFile(`apiVersion: nmstate.io/v1
kind: PooledNodeNetworkConfigurationPolicy
metadata: {name: eth2-small}
spec:
  nodeSelector: {node-role.kubernetes.io/worker: ""}
  capture: {addr: ippool.small.allocate}
  desiredState:
    interfaces:
    - name: eth2
      type: ethernet
      state: up
      ipv4: {enabled: true, dhcp: false, address: [{ip: "{{ capture.addr.ip }}", prefix-length: "{{ capture.addr.prefix-length }}"}]}
`))
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("10.73.0.11"))
	})
}

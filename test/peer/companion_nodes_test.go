package peer

import (
	"errors"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// companionNodeSpecs are the companion Describe's specs on nodes that
// are not simply there: a machine off, a Node deleted while its machine
// runs, a NodeNetworkState left without a state.
func companionNodeSpecs() {
	It("lets a node whose machine is off hold no rollout and no release: ignored NotReady, its own address released once it runs again", func() {
		const other = "eth1-notready"
		statusOfOther := func() string { return statusIn(other) }
		recordOfOther := func(node string) string { return recordIn(other, node) }
		// node05's machine stops before the policy exists: the node
		// lifecycle controller turns it NotReady, no handler runs there.
		localclusterIn(cdir, "node", "add", "node05")
		localclusterIn(cdir, "node", "stop", "node05")
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: other}}
		p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
		p.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
		p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
		one := intstr.FromInt32(1)
		p.Spec.MaxUnavailable = &one
		Expect(kc.Create(ctx, p)).To(Succeed())
		Eventually(statusOfOther).Should(Equal("Available SuccessfullyConfigured: 1/2 nodes successfully configured, 1 nodes ignored due to NotReady state"),
			"the stopped node holds no maxUnavailable slot")
		Expect(carried("node01")).To(ConsistOf(recordOfOther("node01") + "/24"))

		By("its machine runs again: the rollout reaches it")
		localclusterIn(cdir, "node", "start", "node05")
		Eventually(statusOfOther).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
		held := recordOfOther("node05")
		Expect(carried("node05")).To(ConsistOf(held + "/24"))

		By("its machine stops again, with its address, and the pooled policy is deleted")
		localclusterIn(cdir, "node", "stop", "node05")
		Expect(kc.Delete(ctx, p)).To(Succeed())
		Eventually(func() []string { return carried("node01") }).Should(BeEmpty(), "node01's release does not wait for node05")
		Eventually(statusOfOther).Should(HavePrefix("Degraded NodeNotReady: Node node05 is not Ready: "+held+" stay recorded and quarantined"),
			"the deletion says what it waits for")
		Expect(envtest.PoolAddresses(ctx, kc, pool)).To(ContainElement(held), "held while its machine may carry it")

		By("its machine runs again: kubernetes-nmstate's handler takes the address off, and the pooled policy goes")
		localclusterIn(cdir, "node", "start", "node05")
		Eventually(func() error {
			return kc.Get(ctx, client.ObjectKeyFromObject(p), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
		}, 2*time.Minute).Should(MatchError(ContainSubstring("not found")))
		Expect(carried("node05")).To(BeEmpty())
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).Should(BeEmpty())
	})

	It("never puts the address of a Node deleted while its machine runs on another NIC: three nodes join a pool with one free address", func() {
		const tight = "eth1-tight"
		machines := []string{"node06", "node07", "node08", "node09", "node10"}
		Expect(kc.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "tight"},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.75.0.0/24", Start: "10.75.0.10", End: "10.75.0.12"}}})).To(Succeed())
		for _, node := range machines[:2] {
			localclusterIn(cdir, "node", "add", node, "--label", "tight=yes")
		}
		// Every machine, its Node deleted or not, carries no address
		// another carries.
		sampler := envtest.Sample(100*time.Millisecond, func() ([]string, bool) {
			on := map[string][]string{}
			for _, node := range machines {
				for _, addr := range carried(node) {
					on[addr] = append(on[addr], node)
				}
			}
			var problems []string
			for addr, nodes := range on {
				if len(nodes) > 1 {
					problems = append(problems, addr+" on "+strings.Join(nodes, " and "))
				}
			}
			return problems, true
		})
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: tight}}
		p.Spec.NodeSelector = map[string]string{"tight": "yes"}
		p.Spec.Capture = map[string]string{"addr": "ippool.tight.allocate"}
		p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
		Expect(kc.Create(ctx, p)).To(Succeed())
		Eventually(func() string { return statusIn(tight) }).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
		gone := recordIn(tight, "node07")
		Expect(carried("node07")).To(ConsistOf(gone + "/24"))

		By("node07's Node deleted while its machine runs, then three nodes join: one free address, and node07's")
		localclusterIn(cdir, "node", "remove", "node07")
		Expect(carried("node07")).To(BeEmpty(), "off its NIC before its Node went")
		for _, node := range machines[2:] {
			localclusterIn(cdir, "node", "add", node, "--label", "tight=yes")
		}
		// The free address at once; node07's once it is no longer kept
		// for its return (the departure hold): the pool is full.
		served := func() map[string]string {
			out := map[string]string{}
			for _, node := range append([]string{"node06"}, machines[2:]...) {
				if ip := recordIn(tight, node); ip != "" {
					out[node] = ip
				}
			}
			return out
		}
		Eventually(served, 3*time.Minute).Should(HaveLen(3), "two of the three joiners get one")
		Expect(envtest.Distinct(served())).To(HaveLen(3))
		Expect(served()).To(ContainElement(gone), "node07's address, once off its NIC, is handed out again")
		for node, ip := range served() {
			Eventually(func() []string { return carried(node) }).Should(ConsistOf(ip+"/24"), node)
		}
		Eventually(func() string { return statusIn(tight) }).Should(
			HavePrefix("Degraded IPPoolExhausted: NodeIPPool tight has no address left for node"), "the third waits, and says so")
		samples, problems := sampler.End()
		Expect(problems).To(BeEmpty(), "no address on two machines")
		Expect(samples).To(BeNumerically(">", 0))
	})

	It("serves a node whose NodeNetworkState kubernetes-nmstate's handler left without a state: deleted for the handler to publish it again", func() {
		const stuck = "eth1-stuck"
		localclusterIn(cdir, "node", "add", "node11", "--label", "stuck=yes")
		nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "node11"}}
		published := func() bool {
			return kc.Get(ctx, client.ObjectKeyFromObject(nns), nns) == nil && lifecycle.Published(nns)
		}
		Eventually(published).Should(BeTrue())

		By("its state deleted and created again empty before its handler does: the handler's own create fails, and it never writes " +
			"the state of a network it published already")
		var empty types.UID
		Eventually(func() error {
			if err := kc.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "node11"}}); client.IgnoreNotFound(err) != nil {
				return err
			}
			made := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "node11"}}
			if err := kc.Create(ctx, made); err != nil {
				return err // the handler's create came first
			}
			for range 20 {
				time.Sleep(250 * time.Millisecond)
				if err := kc.Get(ctx, client.ObjectKeyFromObject(nns), nns); err != nil {
					return err
				}
				if nns.UID != made.UID || lifecycle.Published(nns) {
					return errors.New("the handler published a state: again")
				}
			}
			empty = made.UID
			return nil
		}, 2*time.Minute, time.Second).Should(Succeed())

		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: stuck}}
		p.Spec.NodeSelector = map[string]string{"stuck": "yes"}
		p.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
		p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
		Expect(kc.Create(ctx, p)).To(Succeed())
		Eventually(func() string { return statusIn(stuck) }).Should(
			HavePrefix("Degraded NodeStateUnknown: the NodeNetworkState of node node11 holds no state"), "it waits, and says why")
		Eventually(func() string { return statusIn(stuck) }).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
		ip := recordIn(stuck, "node11")
		Expect(ip).NotTo(BeEmpty())
		Expect(carried("node11")).To(ConsistOf(ip + "/24"))
		Expect(kc.Get(ctx, client.ObjectKeyFromObject(nns), nns)).To(Succeed())
		Expect(nns.UID).NotTo(Equal(empty), "the empty state was deleted; the handler created it again")
		Expect(envtest.Events(ctx, kc, "PooledNodeNetworkConfigurationPolicy", stuck)).To(
			ContainElement(HavePrefix("NodeStateRenewed: deleted the NodeNetworkState of node node11")))
	})
}

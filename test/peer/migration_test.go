package peer

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// routeViaGateway is a plain policy with a capture that kubernetes-nmstate
// resolves through nmstatectl policy: a route through each node's own
// default gateway.
const routeViaGateway = `routes:
  config:
  - destination: 198.51.100.0/24
    next-hop-address: "{{ capture.gw.routes.running.0.next-hop-address }}"
    next-hop-interface: "{{ capture.gw.routes.running.0.next-hop-interface }}"
`

func policy(name string, selector, captures map[string]string, desired string) *nmstatev1.NodeNetworkConfigurationPolicy {
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = selector
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	return p
}

// staticAddress is one node's policy as admins write them today.
func staticAddress(node, ip string) *nmstatev1.NodeNetworkConfigurationPolicy {
	return envtest.StaticAddressPolicy("eth1-"+node, node, ip)
}

// policyAvailable waits until a policy is Available on every node it
// selects, in kubernetes-nmstate's words (which ours keeps).
func policyAvailable(name string) {
	GinkgoHelper()
	Eventually(func() string { return envtest.PolicyAvailability(ctx, k, name) }).
		Should(MatchRegexp(`^True SuccessfullyConfigured: \d+/\d+ nodes successfully configured$`), "policy %s", name)
}

// applies counts the applies a simulated node's network has taken.
func applies(node string) int { return envtest.Applies(dir, node) }

func appliesOf(nodes []string) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n] = applies(n)
	}
	return out
}

// configured returns the addresses a node's network carries on iface.
func configured(node, iface string) []string {
	return envtest.NewNode(node, filepath.Join(dir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll(iface)
}

// trueCondition returns "Type Reason" of an enactment's True condition.
func trueCondition(e *nncev1beta1.NodeNetworkConfigurationEnactment) string {
	for _, c := range e.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("%s %s", c.Type, c.Reason)
		}
	}
	return "no condition"
}

// sampleAvailability lists the enactments every 100 ms until ended and
// keeps the samples in which one of names was missing or not Available.
func sampleAvailability(names []string) *envtest.Sampler {
	return envtest.Sample(100*time.Millisecond, func() ([]string, bool) {
		var list nncev1beta1.NodeNetworkConfigurationEnactmentList
		if err := k.List(ctx, &list); err != nil {
			return nil, false
		}
		seen := map[string]string{}
		for i := range list.Items {
			seen[list.Items[i].Name] = trueCondition(&list.Items[i])
		}
		var unhealthy []string
		for _, name := range names {
			if got := seen[name]; got != "Available SuccessfullyConfigured" {
				unhealthy = append(unhealthy, fmt.Sprintf("%s is %q", name, got))
			}
		}
		return unhealthy, true
	})
}

// ourStates waits until our handler published every node's
// NodeNetworkState: ours writes its conditions, kubernetes-nmstate's
// writes none.
func ourStates(nodes []string) {
	GinkgoHelper()
	for _, node := range nodes {
		Eventually(func() (string, error) {
			var nns nncev1beta1.NodeNetworkState
			err := k.Get(ctx, client.ObjectKey{Name: node}, &nns)
			return string(conditions.TrueType(nns.Status.Conditions)), err
		}).Should(Equal("Available"), "the NodeNetworkState of %s, written by our handler", node)
	}
}

var _ = Describe("Switching between kubernetes-nmstate's handler and ours", Ordered, func() {
	var plain []string // the plain policies' enactments
	addresses := map[string]string{}

	It("starts from policies applied by kubernetes-nmstate's handler", func() {
		for i, node := range workers {
			p := staticAddress(node, fmt.Sprintf("10.70.0.%d", 11+i))
			Expect(k.Create(ctx, p)).To(Succeed())
			plain = append(plain, node+"."+p.Name)
		}
		Expect(k.Create(ctx, policy("route-via-gw", map[string]string{"node-role.kubernetes.io/worker": ""},
			map[string]string{"gw": `routes.running.destination=="0.0.0.0/0"`}, routeViaGateway))).To(Succeed())
		for _, node := range workers {
			plain = append(plain, node+".route-via-gw")
			policyAvailable("eth1-" + node)
		}
		policyAvailable("route-via-gw")
		for i, node := range workers {
			Expect(configured(node, "eth1")).To(ConsistOf(fmt.Sprintf("10.70.0.%d/24", 11+i)))
		}
	})

	It("switches to ours: no policy is applied again, every enactment stays Available, pooled policies work", func() {
		before := appliesOf(workers)
		sampler := sampleAvailability(plain)
		localcluster("handler", "use", "ours")
		ourStates(workers)
		Consistently(func() map[string]int { return appliesOf(workers) }, 5*time.Second, 250*time.Millisecond).
			Should(Equal(before), "an unchanged policy was applied again")
		samples, unhealthy := sampler.End()
		Expect(unhealthy).To(BeEmpty())
		Expect(samples).To(BeNumerically(">=", 20))

		By("a pool and a pooled policy, served by our handler and the pool controller")
		Expect(k.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "storage"},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.71.0.0/24"}}})).To(Succeed())
		Expect(k.Create(ctx, policy("storage", map[string]string{"node-role.kubernetes.io/worker": ""},
			map[string]string{"addr": "ippool.storage.allocate"}, envtest.AddressState("eth2")))).To(Succeed())
		policyAvailable("storage")
		for _, node := range workers {
			got := configured(node, "eth2")
			Expect(got).To(HaveLen(1), node)
			addresses[node] = got[0]
		}
		Expect(envtest.Distinct(addresses)).To(HaveLen(len(workers)))
		// Since the switch, the pooled policy's apply and nothing else.
		for _, node := range workers {
			Expect(applies(node)).To(Equal(before[node]+1), node)
		}
	})

	It("switches back: kubernetes-nmstate's handler applies every policy again, keeps the recorded addresses and fails pooled policies on new nodes", func() {
		before := appliesOf(workers)
		localcluster("handler", "use", "upstream")
		for _, name := range []string{"route-via-gw", "storage"} {
			policyAvailable(name)
		}
		// It applies every policy of a node when it starts (as after any
		// restart), the pooled one with the address its enactment records
		// (the captured state is taken as it is).
		for _, node := range workers {
			Eventually(func() int { return applies(node) }).Should(BeNumerically(">=", before[node]+3), node)
			Expect(configured(node, "eth2")).To(ConsistOf(addresses[node]), node)
		}
		localcluster("node", "add", "node05")
		DeferCleanup(func() { localcluster("node", "remove", "node05") })
		Eventually(func() string {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			if err := k.Get(ctx, shared.EnactmentKey("node05", "storage"), &e); err != nil {
				return err.Error()
			}
			return trueCondition(&e)
		}).Should(Equal("Failing FailedToConfigure"), "kubernetes-nmstate cannot resolve an ippool capture")
		Expect(configured("node05", "eth2")).To(BeEmpty())
	})
})

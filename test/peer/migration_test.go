package peer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
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

// onEth2 puts the address of the capture addr on eth2.
const onEth2 = `interfaces:
- name: eth2
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
`

func policy(name string, selector, captures map[string]string, desired string) *nmstatev1.NodeNetworkConfigurationPolicy {
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = selector
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	return p
}

// staticAddress is one node's policy as admins write them today: the
// address typed in, the node chosen by its hostname.
func staticAddress(node, ip string) *nmstatev1.NodeNetworkConfigurationPolicy {
	return policy("eth1-"+node, map[string]string{"kubernetes.io/hostname": node}, nil, fmt.Sprintf(`interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: %s
      prefix-length: 24
`, ip))
}

// policyAvailable waits until a policy is Available on every node it
// selects, in kubernetes-nmstate's words (which ours keeps).
func policyAvailable(name string) {
	GinkgoHelper()
	Eventually(func() string {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := p.Status.Conditions.Find(shared.NodeNetworkConfigurationPolicyConditionAvailable)
		if c == nil {
			return "no condition"
		}
		return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}).Should(MatchRegexp(`^True SuccessfullyConfigured: \d+/\d+ nodes successfully configured$`), "policy %s", name)
}

// applies counts the applies a simulated node's network has taken.
func applies(node string) int {
	raw, err := os.ReadFile(filepath.Join(dir, "nodes", node+".yaml.applies"))
	if err != nil {
		return 0
	}
	return bytes.Count(raw, []byte("\n"))
}

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

// availability samples the enactments of the given names every 100 ms
// until stopped and keeps every sample in which one was missing or not
// Available.
type availability struct {
	mu        sync.Mutex
	samples   int
	unhealthy []string
	stop      chan struct{}
	done      sync.WaitGroup
}

func sampleAvailability(names []string) *availability {
	a := &availability{stop: make(chan struct{})}
	a.done.Go(func() {
		for {
			select {
			case <-a.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var list nncev1beta1.NodeNetworkConfigurationEnactmentList
			if err := k.List(ctx, &list); err != nil {
				continue
			}
			seen := map[string]string{}
			for i := range list.Items {
				seen[list.Items[i].Name] = trueCondition(&list.Items[i])
			}
			a.mu.Lock()
			a.samples++
			for _, name := range names {
				if got := seen[name]; got != "Available SuccessfullyConfigured" {
					a.unhealthy = append(a.unhealthy, fmt.Sprintf("%s: %s is %q", time.Now().Format(time.StampMilli), name, got))
				}
			}
			a.mu.Unlock()
		}
	})
	return a
}

func (a *availability) end() (int, []string) {
	close(a.stop)
	a.done.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.samples, slices.Clone(a.unhealthy)
}

// statesSince waits until every node's NodeNetworkState was written after
// t: its new handler runs and has looked at the node.
func statesSince(t time.Time, nodes []string) {
	GinkgoHelper()
	for _, node := range nodes {
		Eventually(func() (time.Time, error) {
			var nns nncev1beta1.NodeNetworkState
			err := k.Get(ctx, client.ObjectKey{Name: node}, &nns)
			return nns.Status.LastSuccessfulUpdateTime.Time, err
		}).Should(BeTemporally(">=", t.Truncate(time.Second)), "the NodeNetworkState of %s", node)
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
		switched := time.Now()
		localcluster("handler", "use", "ours")
		statesSince(switched, workers)
		Consistently(func() map[string]int { return appliesOf(workers) }, 5*time.Second, 250*time.Millisecond).
			Should(Equal(before), "an unchanged policy was applied again")
		samples, unhealthy := sampler.end()
		Expect(unhealthy).To(BeEmpty())
		Expect(samples).To(BeNumerically(">=", 20))

		By("a pool and a pooled policy, served by our handler and the pool controller")
		Expect(k.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "storage"},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.71.0.0/24"}}})).To(Succeed())
		Expect(k.Create(ctx, policy("storage", map[string]string{"node-role.kubernetes.io/worker": ""},
			map[string]string{"addr": "ippool.storage.allocate"}, onEth2))).To(Succeed())
		policyAvailable("storage")
		for _, node := range workers {
			got := configured(node, "eth2")
			Expect(got).To(HaveLen(1), node)
			addresses[node] = got[0]
		}
		Expect(envtest.Distinct(addresses)).To(HaveLen(len(workers)))
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
			Eventually(func() int { return applies(node) }).Should(Equal(before[node]+3), node)
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

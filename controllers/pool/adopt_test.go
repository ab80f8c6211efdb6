package pool_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// carryingNode adds a node whose network already carries ip on eth1 (as a
// per-node policy left it), or nothing when ip is "".
func carryingNode(t *testing.T, dir, name, role, ip string) *envtest.Node {
	t.Helper()
	return addNodeWith(t, dir, name, role, func(nd *envtest.Node) {
		if ip == "" {
			return
		}
		state := fmt.Sprintf("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  ipv4:\n    enabled: true\n    dhcp: false\n"+
			"    address:\n    - ip: %s\n      prefix-length: 24\n", ip)
		Expect(nd.Network.Runner.Apply(ctx, []byte(state))).To(Succeed())
		Expect(nd.Network.Runner.Commit(ctx)).To(Succeed())
	})
}

// statePublishedAfter reports whether the node's NodeNetworkState was
// written after at.
func statePublishedAfter(node string, at time.Time) func() bool {
	return func() bool {
		var nns nncev1beta1.NodeNetworkState
		return k.Get(ctx, types.NamespacedName{Name: node}, &nns) == nil && nns.Status.LastSuccessfulUpdateTime.After(at)
	}
}

// TestAdoptCarriedAddresses: nodes that carry static addresses on eth1
// (typed into one policy per node) get a pool and one pooled policy for
// eth1. Each keeps the address it carries, with no moment without it; a
// node whose address the pool cannot give it is told why and gets a new
// one; a node that carries nothing gets a new one.
func TestAdoptCarriedAddresses(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, time.Minute)
	dir := t.TempDir()
	carriers := map[string]string{"adopt01": "10.59.0.43", "adopt02": "10.59.0.46", "adopt03": "10.59.0.5", "adopt04": ""}
	nodes := map[string]*envtest.Node{}
	for _, name := range []string{"adopt01", "adopt02", "adopt03", "adopt04"} {
		nodes[name] = carryingNode(t, dir, name, "adopt", carriers[name])
	}
	for name, ip := range carriers {
		if ip != "" {
			Eventually(func() bool { return strings.Contains(nodeStateOf(name), ip) }).Should(BeTrue(), "the state of %s", name)
		}
	}
	nics := sampleNICs(t, nodes["adopt01"], nodes["adopt02"], nodes["adopt03"], nodes["adopt04"])
	nics.mustKeep("adopt01", netip.MustParseAddr("10.59.0.43"))
	nics.mustKeep("adopt02", netip.MustParseAddr("10.59.0.46"))

	createPool(t, "adopt", ippoolv1.IPRange{CIDR: "10.59.0.0/24", Start: "10.59.0.2", End: "10.59.0.100", Exclude: []string{"10.59.0.5"}})
	Eventually(available("adopt")).Should(HavePrefix("True"))
	// The pool holds what the nodes carry for them; asked for evidence,
	// the nodes publish their state, and take nothing off: no record
	// released those addresses.
	Expect(bits("adopt")).To(Equal([]string{"10.59.0.43", "10.59.0.46"}))
	quarantined := time.Now()
	Eventually(statePublishedAfter("adopt01", quarantined.Add(time.Second))).Should(BeTrue())
	Expect(carried(nodes["adopt01"])()).To(Equal([]string{"10.59.0.43/24"}))

	createPolicy(t, "adopt", "adopt", "adopt")
	for name := range carriers {
		Eventually(enactmentState(name+".adopt")).Should(HavePrefix("Available"), name)
	}
	Expect(held("adopt01.adopt", "adopt")).To(Equal([]string{"10.59.0.43"}))
	Expect(held("adopt02.adopt", "adopt")).To(Equal([]string{"10.59.0.46"}))
	Expect(held("adopt03.adopt", "adopt")).To(Equal([]string{"10.59.0.2"}))
	Expect(held("adopt04.adopt", "adopt")).To(Equal([]string{"10.59.0.3"}))
	Expect(carried(nodes["adopt01"])()).To(Equal([]string{"10.59.0.43/24"}))
	Expect(carried(nodes["adopt03"])()).To(Equal([]string{"10.59.0.2/24"}))
	Eventually(events("NodeNetworkConfigurationEnactment", "adopt01.adopt")).Should(ContainElement(
		"AddressAdopted: NodeIPPool adopt adopted 10.59.0.43 on eth1: the node already carried it, so its network does not change"))
	notAdopted := "NodeIPPool adopt could not adopt what the node carries: 10.59.0.5 on eth1 (it is excluded from the range 10.59.0.2-10.59.0.100)"
	Eventually(events("NodeNetworkConfigurationEnactment", "adopt03.adopt")).Should(ContainElement(HavePrefix("AddressNotAdopted: " + notAdopted)))
	Expect(enactmentState("adopt03.adopt")()).To(ContainSubstring("could not adopt what the node carried: 10.59.0.5 on eth1 (it is excluded"))
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: "adopt"}, &p)).To(Succeed())
	Expect(p.Status.Quarantined).To(BeEmpty(), "the adopted addresses are no longer held apart")
	assertIndexed("adopt")
	Expect(nics.withoutAddress()).To(BeEmpty())
	Expect(nics.onTwoNICs()).To(BeEmpty())
}

// TestTemplateErrorsHoldNoAddress: a pooled policy whose template reads
// the gateway of a pool that sets none fails at once with a message that
// names the capture, the field and the fix, and holds no address; once
// the pool sets a gateway, it is served.
func TestTemplateErrorsHoldNoAddress(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, time.Minute)
	addNode(t, t.TempDir(), "tmpl01", "tmpl")
	createPool(t, "tmpl", ippoolv1.IPRange{CIDR: "10.61.0.0/24", Start: "10.61.0.2", End: "10.61.0.9"})
	Eventually(available("tmpl")).Should(HavePrefix("True"))
	policy := createPolicyWith(t, "tmpl", "tmpl", map[string]string{"addr": "ippool.tmpl.allocate"}, envtest.OneAddressState+
		"routes:\n  config:\n  - destination: 0.0.0.0/0\n    next-hop-address: \"{{ capture.addr.gateway }}\"\n    next-hop-interface: eth1\n")
	Eventually(enactmentState("tmpl01.tmpl")).Should(Equal("Failing: the desired state cannot be rendered: the template reads " +
		"{{ capture.addr.gateway }}, but NodeIPPool tmpl sets no spec.gateway (which a pool cannot gain once created): " +
		"draw the capture from a pool that sets spec.gateway, or remove the reference from the policy"))
	Consistently(func() []string { return bits("tmpl") }, 2*time.Second).Should(BeEmpty())

	// Fixed, the policy is served.
	Expect(k.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
	policy.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	Expect(k.Update(ctx, policy)).To(Succeed())
	Eventually(enactmentState("tmpl01.tmpl"), time.Minute).Should(HavePrefix("Available"))
	Expect(held("tmpl01.tmpl", "tmpl")).To(Equal([]string{"10.61.0.2"}))

	// A reference no pool can ever give is refused before any node asks.
	Expect(k.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
	policy.Spec.DesiredState = shared.NewState(strings.ReplaceAll(envtest.OneAddressState, "capture.addr.prefix-length", "capture.addr.prefix"))
	Expect(k.Update(ctx, policy)).To(Succeed())
	Eventually(enactmentState("tmpl01.tmpl")).Should(ContainSubstring(
		`the template reads {{ capture.addr.prefix }}, but capture "addr" (ippool.tmpl.allocate) has no field "prefix"`))
}

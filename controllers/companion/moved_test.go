package companion_test

import (
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestTemplateMovesTheAddress: a pooled policy edited to put its address
// on another interface (eth2 to eth3) has kubernetes-nmstate's handler
// take it off eth2 as it puts it on eth3: nmstate leaves an interface a
// state does not name as it is, and the address would be on two NICs.
// eth2 keeps its other address, the node keeps its address, and once the
// move is applied the node's policy is the template's state alone (no
// snapshot of eth2's addresses left in it).
func TestTemplateMovesTheAddress(t *testing.T) {
	u := begin(t, "mv", "mv-1")
	createPool(t, "cmp-mv", rangeSpec("10.84.0.0/24", "10.84.0.10", "10.84.0.30"))
	p := pooled("mv", "mv", "cmp-mv", "")
	p.Spec.DesiredState = shared.NewState(envtest.AddressOn("eth2", "192.0.2.9/24"))
	create(t, p)
	const done = "Available SuccessfullyConfigured: 1/1 nodes successfully configured"
	Eventually(status("mv")).Should(Equal(done))
	address := addressOf("mv", "mv-1")()
	n := u.Node("mv-1")
	Expect(n.ConfiguredAll("eth2")).To(ConsistOf(address+"/24", "192.0.2.9/24"))

	Expect(envtest.Edit(ctx, k, p, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
		p.Spec.DesiredState = shared.NewState(envtest.AddressOn("eth3"))
	})).To(Succeed())
	Eventually(func() []string { return n.ConfiguredAll("eth3") }).Should(ConsistOf(address + "/24"))
	Expect(n.ConfiguredAll("eth2")).To(ConsistOf("192.0.2.9/24"), "the address is on two NICs, or eth2 lost its own")
	Eventually(func(g Gomega) {
		var g1 nmstatev1.NodeNetworkConfigurationPolicy
		g.Expect(k.Get(ctx, types.NamespacedName{Name: "mv-mv-1"}, &g1)).To(Succeed())
		g.Expect(string(g1.Spec.DesiredState.Raw)).NotTo(ContainSubstring("eth2"), "the node's policy keeps eth2's addresses")
		g.Expect(status("mv")()).To(Equal(done))
	}).Should(Succeed())
	Expect(addressOf("mv", "mv-1")()).To(Equal(address))
	Expect(n.ConfiguredAll("eth2")).To(ConsistOf("192.0.2.9/24"))
	Expect(n.ConfiguredAll("eth3")).To(ConsistOf(address + "/24"))
}

// TestTemplateMoveOffLearnedFamily: an address the template no longer
// puts on an interface whose family is configured by DHCP or autoconf
// cannot be taken off alone: the node's policy puts it where the template
// says, and a Warning Event on the pooled policy says it is on the old
// interface too (that it is said once, TestReportRenderSaysChangesOnly).
// Each node's Warning is kept: the Events of two nodes on the one pooled
// policy, with the same reason, would otherwise fold into one series that
// keeps the first node's note only, and the second address to take off
// by hand would go unsaid.
func TestTemplateMoveOffLearnedFamily(t *testing.T) {
	nodes := []string{"mvl-1", "mvl-2"}
	u := begin(t, "mvl", nodes...)
	createPool(t, "cmp-mvl", rangeSpec("10.85.0.0/24", "10.85.0.10", "10.85.0.30"))
	p := pooled("mvl", "mvl", "cmp-mvl", "")
	p.Spec.DesiredState = shared.NewState(strings.Replace(envtest.AddressOn("eth2"), "dhcp: false", "dhcp: true", 1))
	create(t, p)
	const done = "Available SuccessfullyConfigured: 2/2 nodes successfully configured"
	Eventually(status("mvl")).Should(Equal(done))
	address := map[string]string{}
	for _, node := range nodes {
		address[node] = addressOf("mvl", node)()
	}

	Expect(envtest.Edit(ctx, k, p, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
		p.Spec.DesiredState = shared.NewState(envtest.AddressOn("eth3"))
	})).To(Succeed())
	for _, node := range nodes {
		n := u.Node(node)
		Eventually(func() []string { return n.ConfiguredAll("eth3") }).Should(ConsistOf(address[node]+"/24"), node)
	}
	Eventually(status("mvl")).Should(Equal(done))
	notMoved := func() []string {
		var out []string
		for _, e := range events("mvl")() {
			if strings.HasPrefix(e, ippoolv1.ReasonAddressNotMoved) {
				out = append(out, e)
			}
		}
		return out
	}
	var want []any
	for _, node := range nodes {
		want = append(want, And(
			HavePrefix(ippoolv1.ReasonAddressNotMoved+": "+address[node]+" is on node "+node+"'s interface eth2 too"),
			ContainSubstring("ipv4 is configured by DHCP or autoconf")))
	}
	Eventually(notMoved).Should(ConsistOf(want...))
}

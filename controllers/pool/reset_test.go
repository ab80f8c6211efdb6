package pool_test

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestResetIsMakeBeforeBreak: a node whose enactment is reset keeps its old
// address on its interface until the new one is applied in its place, and
// ends on another address of the pool. Before, the node's handler took the
// old address off as soon as it was quarantined, before the new one was
// served: the node had no address until the pool controller served it,
// and when that came after the quarantine lifted, it got the same address
// back (issue 35, case 10).
func TestResetIsMakeBeforeBreak(t *testing.T) {
	nodes, old := twoNodesOf(t, "mbb", ippoolv1.IPRange{CIDR: "10.12.0.0/24", Start: "10.12.0.1", End: "10.12.0.10"})

	nics := sampleNICs(t, nodes...)
	nics.mustCarryIn("mbb02", netip.MustParsePrefix("10.12.0.0/24"))
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "mbb02.mbb"}}, "mbb")
	Eventually(func() []string { return held("mbb02.mbb", "mbb") }).ShouldNot(Or(BeEmpty(), Equal(old)))
	renewed := held("mbb02.mbb", "mbb")[0]
	Eventually(carried(nodes[1])).Should(Equal([]string{renewed + "/24"}), "the new address replaces the old one")
	Eventually(enactmentState("mbb02.mbb")).Should(HavePrefix("Available"))
	Expect(nics.withoutAddress()).To(BeEmpty(), "the node was without an address of the pool")
	Expect(nics.onTwoNICs()).To(BeEmpty())
	Eventually(func() []string { return bits("mbb") }).ShouldNot(ContainElement(old[0]), "free once the node shows it gone")
}

// TestResetOfAFullPool: a reset on a pool with no other address left
// cannot be made before it breaks: the old address comes off, its
// quarantine lifts on the node's evidence, and the node gets it back.
// Nothing waits for a replacement that cannot come.
func TestResetOfAFullPool(t *testing.T) {
	nodes, old := twoNodesOf(t, "full-reset", ippoolv1.IPRange{CIDR: "10.13.0.0/24", Start: "10.13.0.1", End: "10.13.0.2"})

	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "full-reset02.full-reset"}}, "full-reset")
	Eventually(events("NodeNetworkConfigurationEnactment", "full-reset02.full-reset")).Should(ContainElement(HavePrefix("AddressesDropped")))
	Eventually(func() []string { return held("full-reset02.full-reset", "full-reset") }).Should(Equal(old))
	Eventually(enactmentState("full-reset02.full-reset")).Should(HavePrefix("Available"))
	Eventually(carried(nodes[1])).Should(Equal([]string{old[0] + "/24"}))
}

// twoNodesOf starts a pool controller, a pool and a policy called name
// and two nodes with their handlers, and returns the nodes once both have
// their addresses, with the second node's address.
func twoNodesOf(t *testing.T, name string, r ippoolv1.IPRange) ([]*envtest.Node, []string) {
	t.Helper()
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, name, r)
	Eventually(available(name)).Should(HavePrefix("True"))
	createPolicy(t, name, name, name)
	nodes := newNodes(t, name, 2)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + "." + name)).Should(HavePrefix("Available"))
	}
	old := held(nodes[1].Name+"."+name, name)
	Expect(old).To(HaveLen(1))
	Eventually(carried(nodes[1])).Should(Equal([]string{old[0] + "/24"}))
	return nodes, old
}

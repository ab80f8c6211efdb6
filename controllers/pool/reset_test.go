package pool_test

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// TestResetIsMakeBeforeBreak: a node whose enactment is reset keeps its old
// address on its interface until the new one is applied in its place, and
// ends on another address of the pool. Before, the node's handler took the
// old address off as soon as it was quarantined, before the new one was
// served: the node had no address until the pool controller served it,
// and when that came after the quarantine lifted, it got the same address
// back (issue 35, case 10).
func TestResetIsMakeBeforeBreak(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "mbb", ippoolv1.IPRange{CIDR: "10.12.0.0/24", Start: "10.12.0.1", End: "10.12.0.10"})
	Eventually(available("mbb")).Should(HavePrefix("True"))
	createPolicy(t, "mbb", "mbb", "mbb")
	nodes := newNodes(t, "mbb", 2)
	for _, name := range []string{"mbb01.mbb", "mbb02.mbb"} {
		Eventually(enactmentState(name)).Should(HavePrefix("Available"))
	}
	old := held("mbb02.mbb", "mbb")
	Expect(old).To(HaveLen(1))
	Eventually(carried(nodes[1])).Should(Equal([]string{old[0] + "/24"}))

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
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "full-reset", ippoolv1.IPRange{CIDR: "10.13.0.0/24", Start: "10.13.0.1", End: "10.13.0.2"})
	Eventually(available("full-reset")).Should(HavePrefix("True"))
	createPolicy(t, "full-reset", "full-reset", "full-reset")
	nodes := newNodes(t, "full-reset", 2)
	for _, name := range []string{"full-reset01.full-reset", "full-reset02.full-reset"} {
		Eventually(enactmentState(name)).Should(HavePrefix("Available"))
	}
	old := held("full-reset02.full-reset", "full-reset")
	Expect(old).To(HaveLen(1))

	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "full-reset02.full-reset"}}, "full-reset")
	Eventually(events("NodeNetworkConfigurationEnactment", "full-reset02.full-reset")).Should(ContainElement(HavePrefix("AddressesDropped")))
	Eventually(func() []string { return held("full-reset02.full-reset", "full-reset") }).Should(Equal(old))
	Eventually(enactmentState("full-reset02.full-reset")).Should(HavePrefix("Available"))
	Eventually(carried(nodes[1])).Should(Equal([]string{old[0] + "/24"}))
}

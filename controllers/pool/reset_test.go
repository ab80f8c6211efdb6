package pool_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestResetIsMakeBeforeBreak: a node whose enactment is reset keeps its old
// address on its interface until the new one is applied in its place, and
// ends on another address of the pool. Before, the node's handler took the
// old address off as soon as it was quarantined, before the new one was
// served: the node had no address until the pool controller served it,
// and when that came after the quarantine lifted, it got the same address
// back (issue 35, case 10). The same holds whether the pool controller
// serves the replacement or the handler allocates it (--self-allocate).
func TestResetIsMakeBeforeBreak(t *testing.T) {
	for _, tc := range []struct {
		name, pool, net string
		tune            func(*handler.Reconciler)
	}{
		{"served", "mbb", "10.12.0", func(*handler.Reconciler) {}},
		{"self-allocated", "mbbself", "10.12.1", func(r *handler.Reconciler) { r.SelfAllocate = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.pool
			nodes, old := twoNodesOf(t, name, ippoolv1.IPRange{CIDR: tc.net + ".0/24", Start: tc.net + ".1", End: tc.net + ".10"},
				func(nd *envtest.Node) { nd.Tune = tc.tune })
			enactment := name + "02." + name

			nics := envtest.SampleNICs(t, nodes...)
			nics.MustCarryIn(name+"02", netip.MustParsePrefix(tc.net+".0/24"))
			annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: enactment}}, name)
			Eventually(func() []string { return held(enactment, name) }).ShouldNot(Or(BeEmpty(), Equal(old)))
			renewed := held(enactment, name)[0]
			Eventually(carried(nodes[1])).Should(Equal([]string{renewed + "/24"}), "the new address replaces the old one")
			Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
			Expect(nics.WithoutAddress()).To(BeEmpty(), "the node was without an address of the pool")
			Expect(nics.OnTwoNICs()).To(BeEmpty())
			Eventually(func() []string { return bits(name) }).ShouldNot(ContainElement(old[0]), "free once the node shows it gone")
		})
	}
}

// TestResetWaitingForASlotKeepsItsAddress: a reset whose replacement is
// recorded but waits for a maxUnavailable slot keeps the old address on
// its interface while the pool quarantines it and asks the node for its
// state: the node takes the old one off only with the apply that puts the
// new one on. The other node holds the policy's one slot, its handler
// stopped mid-apply, until the test lets it go.
func TestResetWaitingForASlotKeepsItsAddress(t *testing.T) {
	nodes, old := twoNodesOf(t, "slotwait", ippoolv1.IPRange{CIDR: "10.15.0.0/24", Start: "10.15.0.1", End: "10.15.0.10"})
	Expect(nodes[0].Stop()).To(Succeed())
	holdSlot := func(granted bool) { holdSlotOf("slotwait01.slotwait", granted) }
	holdSlot(true)

	nics := envtest.SampleNICs(t, nodes[1])
	nics.MustCarryIn("slotwait02", netip.MustParsePrefix("10.15.0.0/24"))
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "slotwait02.slotwait"}}, "slotwait")
	Eventually(func() []string { return held("slotwait02.slotwait", "slotwait") }).ShouldNot(Or(BeEmpty(), Equal(old)))
	renewed := held("slotwait02.slotwait", "slotwait")[0]
	Eventually(enactmentState("slotwait02.slotwait")).Should(HavePrefix("Pending: maxUnavailable"))
	Eventually(func() *ippoolv1.QuarantinedAddress {
		s := poolStatus("slotwait")
		return quarantined(&s, old[0])
	}).ShouldNot(BeNil(), "the old address is quarantined while the node still carries it")
	// The pool asks the node for its state again later (askAgainAfter);
	// ask now, with the replacement recorded and not yet applied.
	before := publishedAt("slotwait02")
	Eventually(func() time.Time { return time.Now().Truncate(time.Second) }).Should(BeTemporally(">", before),
		"a publication from now on shows a later second (its times have seconds)")
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "slotwait02"}}
	Expect(k.Patch(ctx, nns, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:"%d"}}}`,
		ippoolv1.RefreshStateLabel, time.Now().UnixNano())))).To(Succeed())
	Eventually(func() bool { return publishedAt("slotwait02").After(before) }).Should(BeTrue(), "the node answered")
	Consistently(carried(nodes[1]), time.Second).Should(Equal([]string{old[0] + "/24"}),
		"the old address stays until the apply that puts its replacement on")

	holdSlot(false)
	Eventually(carried(nodes[1])).Should(Equal([]string{renewed + "/24"}), "the new address replaces the old one")
	Eventually(enactmentState("slotwait02.slotwait")).Should(HavePrefix("Available"))
	Expect(nics.WithoutAddress()).To(BeEmpty(), "the node was without an address of the pool")
	Expect(nics.OnTwoNICs()).To(BeEmpty())
	Eventually(func() []string { return bits("slotwait") }).ShouldNot(ContainElement(old[0]), "free once the node shows it gone")
}

// TestAbortedResetKeepsTheOldAddress: a reset whose node may not apply
// (the policy's rollout is aborted: as many nodes as maxUnavailable gave
// up on its generation) keeps the old address on its interface, held from
// everyone, while the replacement waits recorded. The fixed policy's next
// generation puts the new address on in the old one's place, and the pool
// frees the old one once the node shows it gone: never a moment without
// an address, never one on two NICs.
func TestAbortedResetKeepsTheOldAddress(t *testing.T) {
	const name = "abortreset"
	nodes, old := twoNodesOf(t, name, ippoolv1.IPRange{CIDR: "10.16.0.0/24", Start: "10.16.0.1", End: "10.16.0.10"},
		func(nd *envtest.Node) { nd.Tune = func(r *handler.Reconciler) { r.Retry.Steps = 0 } })
	failing, reset := name+"01."+name, name+"02."+name
	nics := envtest.SampleNICs(t, nodes...)
	nics.MustCarryIn(name+"02", netip.MustParsePrefix("10.16.0.0/24"))
	maxUnavailable := func(n int32) (generation int64) {
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p nmstatev1.NodeNetworkConfigurationPolicy
			if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
				return err
			}
			v := intstr.FromInt32(n) // a new generation
			p.Spec.MaxUnavailable = &v
			err := k.Update(ctx, &p)
			generation = p.Generation
			return err
		})).To(Succeed())
		return generation
	}
	state := func(enactment string) func() string {
		return func() string {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			if err := k.Get(ctx, types.NamespacedName{Name: enactment}, &e); err != nil {
				return err.Error()
			}
			return fmt.Sprintf("%s at %d", conditions.TrueType(e.Status.Conditions), e.Status.PolicyGeneration)
		}
	}

	// A generation that fails on the first node, which is maxUnavailable
	// (1 of 2): the rollout is aborted. The first node is held back (its
	// network does not answer) until the second has applied the
	// generation, so that the abort reaches the second node through its
	// reset, not before it.
	Expect(os.WriteFile(nodes[0].State+".fail", []byte("apply: eth1: no such device (simulated)\n"), 0o600)).To(Succeed())
	resume := nodes[0].Network.Stall()
	t.Cleanup(resume)
	g := maxUnavailable(1)
	Eventually(state(reset)).Should(Equal(fmt.Sprintf("Available at %d", g)))
	resume()
	Eventually(state(failing)).Should(Equal(fmt.Sprintf("Failing at %d", g)))
	Eventually(policyCondition(name, shared.NodeNetworkConfigurationPolicyConditionDegraded)).Should(HavePrefix("True"))

	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: reset}}, name)
	Eventually(func() []string { return held(reset, name) }).ShouldNot(Or(BeEmpty(), Equal(old)))
	renewed := held(reset, name)[0]
	Eventually(state(reset)).Should(Equal(fmt.Sprintf("Aborted at %d", g)))
	Consistently(carried(nodes[1]), 2*time.Second).Should(Equal([]string{old[0] + "/24"}),
		"the aborted rollout applies nothing: the old address stays on")
	Expect(bits(name)).To(ContainElements(old[0], renewed), "both are held: the old one until the node shows it gone")

	Expect(os.Remove(nodes[0].State + ".fail")).To(Succeed())
	maxUnavailable(2)
	Eventually(carried(nodes[1])).Should(Equal([]string{renewed + "/24"}), "the new address replaces the old one")
	Eventually(enactmentState(reset)).Should(HavePrefix("Available"))
	Eventually(enactmentState(failing)).Should(HavePrefix("Available"))
	Expect(nics.WithoutAddress()).To(BeEmpty(), "the node was without an address of the pool")
	Expect(nics.OnTwoNICs()).To(BeEmpty())
	Eventually(func() []string { return bits(name) }).ShouldNot(ContainElement(old[0]), "free once the node shows it gone")
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
// and two nodes with their handlers (adjusted by adjust, if given), and
// returns the nodes once both have their addresses, with the second node's
// address.
func twoNodesOf(t *testing.T, name string, r ippoolv1.IPRange, adjust ...func(*envtest.Node)) ([]*envtest.Node, []string) {
	t.Helper()
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, name, r)
	Eventually(available(name)).Should(HavePrefix("True"))
	createPolicy(t, name, name, name)
	nodes := newNodes(t, name, 2, adjust...)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + "." + name)).Should(HavePrefix("Available"))
	}
	old := held(nodes[1].Name+"."+name, name)
	Expect(old).To(HaveLen(1))
	Eventually(carried(nodes[1])).Should(Equal([]string{old[0] + "/24"}))
	return nodes, old
}

// holdSlotOf grants the enactment a maxUnavailable slot by hand, or with
// granted false takes it away, as a handler stopped mid-apply would hold
// one: the policy's other nodes wait for it.
func holdSlotOf(enactment string, granted bool) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: enactment}, &e); err != nil {
			return err
		}
		e.Status.Slot = nil
		if granted {
			now := metav1.NowMicro()
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: now, Granted: &now}
		}
		return k.Status().Update(ctx, &e)
	})).To(Succeed())
}

// publishedAt returns when node last published its NodeNetworkState, or
// the zero time.
func publishedAt(node string) time.Time {
	var nns nncev1beta1.NodeNetworkState
	if err := k.Get(ctx, types.NamespacedName{Name: node}, &nns); err != nil {
		return time.Time{}
	}
	return nns.Status.LastSuccessfulUpdateTime.Time
}

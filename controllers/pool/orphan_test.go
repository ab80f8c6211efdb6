package pool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestNodeDeletedWhileItsMachineRuns: an admin deletes a Node whose
// machine still runs (kubectl delete node before draining it). The pools
// free what the Node held at once: a deleted Node is evidence. The
// machine's handler, which keeps running, takes the addresses off its
// interfaces before anyone can be handed them, even though its probes,
// which read its Node, can no longer pass: a rollback would put the
// address back beside the node it is handed to.
func TestNodeDeletedWhileItsMachineRuns(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "unreg", ippoolv1.IPRange{CIDR: "10.74.0.0/24", Start: "10.74.0.1", End: "10.74.0.1"})
	Eventually(available("unreg")).Should(HavePrefix("True"))
	createPolicy(t, "unreg", "unreg", "unreg")
	dir := t.TempDir()
	holder := addNodeWith(t, dir, "unreg01", "unreg", probingItsNode)
	Eventually(enactmentState("unreg01.unreg")).Should(HavePrefix("Available"))
	next := addNode(t, dir, "unreg02", "unreg")
	s := envtest.SampleNICs(t, holder, next)
	Eventually(enactmentState("unreg02.unreg")).Should(ContainSubstring("is exhausted"))

	Expect(k.Delete(ctx, newNode("unreg01", "unreg"))).To(Succeed())
	Eventually(carried(holder)).Should(BeEmpty(), "the machine of a deleted Node takes its pool's addresses off")
	Eventually(enactmentState("unreg02.unreg")).Should(HavePrefix("Available"))
	Expect(carried(next)()).To(Equal([]string{"10.74.0.1/24"}))
	Eventually(events("NodeIPPool", "unreg")).Should(ContainElement("AddressReleased: Node unreg01 took released 10.74.0.1 (eth1) off"))
	Expect(s.OnTwoNICs()).To(BeEmpty(), "one address, one NIC")
	assertIndexed("unreg")
}

// TestNodeDeletedCarryingWhatNoRecordHolds: a node carries an address of
// a pool's range that nothing in the cluster records for it (its Node
// came back from an etcd snapshot taken before it joined, or a per-node
// policy put the address on), and its Node is deleted while the machine
// runs. While the Node exists its state keeps the address from anyone
// else; once the Node is gone nothing does, and the pool may hand it out
// at any time: the machine's handler takes it off, though no record of
// the node released it, and the pool hands it to no one for the
// departure hold, in which the machine is to do so, even when its
// handler is held up and the garbage collector has taken the Node's state
// with it.
func TestNodeDeletedCarryingWhatNoRecordHolds(t *testing.T) {
	RegisterTestingT(t)
	const hold = 15 * time.Second // the departure hold, capped by the quarantine period
	startControllerWith(t, hold)
	createPool(t, "norec", ippoolv1.IPRange{CIDR: "10.74.5.0/24", Start: "10.74.5.1", End: "10.74.5.1"})
	Eventually(available("norec")).Should(HavePrefix("True"))
	dir := t.TempDir()
	holder := carryingNode(t, dir, "norec01", "norec-none", "10.74.5.1", false)
	Eventually(statePublishedAfter("norec01", time.Time{})).Should(BeTrue())
	createPolicy(t, "norec", "norec", "norec")
	next := addNode(t, dir, "norec02", "norec")
	s := envtest.SampleNICs(t, holder, next)
	Eventually(events("NodeIPPool", "norec")).Should(ContainElement(HavePrefix("ExhaustedIPPool: NodeIPPool norec has no address left for node norec02")),
		"the only address is carried by norec01, whose Node exists")
	Eventually(enactmentState("norec02.norec")).Should(HavePrefix("Pending"))
	Expect(carried(holder)()).To(Equal([]string{"10.74.5.1/24"}), "no record released it: it stays")

	// The machine's handler is held up (an apply in progress, a slow
	// machine) when the Node goes: the departure hold keeps the address
	// from norec02 meanwhile, though the Node's state now counts for
	// nothing.
	resume := holder.Network.Stall()
	defer resume()
	var node corev1.Node
	Expect(k.Get(ctx, types.NamespacedName{Name: "norec01"}, &node)).To(Succeed())
	Expect(k.Delete(ctx, &node)).To(Succeed())
	Expect(envtest.CollectOrphans(ctx, k, node.UID, &nncev1beta1.NodeNetworkStateList{})).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k.Get(ctx, types.NamespacedName{Name: "norec01"}, &nncev1beta1.NodeNetworkState{}))
	}).Should(BeTrue(), "the state is collected with its Node")
	Consistently(enactmentState("norec02.norec"), hold-5*time.Second).Should(HavePrefix("Pending"),
		"norec01's machine may carry the address for the departure hold, counted from the Node's deletion")
	Expect(carried(holder)()).To(Equal([]string{"10.74.5.1/24"}))
	resume()
	Eventually(carried(holder)).Should(BeEmpty(), "the machine of a deleted Node takes off what nothing protects")
	Eventually(enactmentState("norec02.norec"), 2*time.Minute).Should(HavePrefix("Available"), "served once the departure hold has passed")
	Expect(carried(next)()).To(Equal([]string{"10.74.5.1/24"}))
	Eventually(events("NodeIPPool", "norec")).Should(ContainElement("AddressReleased: Node norec01 took released 10.74.5.1 (eth1) off"))
	Expect(s.OnTwoNICs()).To(BeEmpty(), "one address, one NIC")
	assertIndexed("norec")
}

// TestWaitingNodeServedOnceTheCarrierTakesItOff: the only free address
// of a pool is carried by a node that no record holds it for (a static
// address a per-node policy put on), so the node that joins waits. The
// admin takes the static address off; the carrier's new state frees it,
// and the waiting node gets it, with nothing else changing.
func TestWaitingNodeServedOnceTheCarrierTakesItOff(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "static", ippoolv1.IPRange{CIDR: "10.74.6.0/24", Start: "10.74.6.1", End: "10.74.6.1"})
	Eventually(available("static")).Should(HavePrefix("True"))
	dir := t.TempDir()
	holder := carryingNode(t, dir, "static01", "static-none", "10.74.6.1", false)
	Eventually(statePublishedAfter("static01", time.Time{})).Should(BeTrue())
	createPolicy(t, "static", "static", "static")
	next := addNode(t, dir, "static02", "static")
	s := envtest.SampleNICs(t, holder, next)
	Eventually(events("NodeIPPool", "static")).Should(ContainElement(HavePrefix("ExhaustedIPPool: NodeIPPool static has no address left for node static02")))
	Eventually(events("NodeNetworkConfigurationEnactment", "static02.static")).Should(ContainElement(
		"ExhaustedIPPool: NodeIPPool static has no address left for this node: 1 more are carried by nodes' networks and recorded by no holder; "+
			"it is served once one is free. Take those addresses off the nodes that carry them ('kubectl nodeippool check static' lists them), "+
			"free addresses, or grow the range"), "the enactment says why it waits")

	bare := "interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  ipv4:\n    enabled: false\n"
	Expect(holder.Network.Runner.Apply(ctx, []byte(bare))).To(Succeed())
	Expect(holder.Network.Runner.Commit(ctx)).To(Succeed())
	Eventually(enactmentState("static02.static")).Should(HavePrefix("Available"))
	Expect(carried(next)()).To(Equal([]string{"10.74.6.1/24"}))
	Expect(s.OnTwoNICs()).To(BeEmpty(), "one address, one NIC")
	assertIndexed("static")
}

// probingItsNode gives a node a probe that needs its Node, as
// node-readiness does.
func probingItsNode(nd *envtest.Node) {
	nd.Tune = func(r *handler.Reconciler) {
		r.Probes = probe.Set{Interval: 100 * time.Millisecond, Timeout: 2 * time.Second, Probes: []probe.Probe{{
			Name: "node-exists",
			Check: func(ctx context.Context) error {
				if err := k.Get(ctx, types.NamespacedName{Name: nd.Name}, &corev1.Node{}); err != nil {
					return fmt.Errorf("get node %q: %w", nd.Name, err)
				}
				return nil
			},
		}}}
	}
}

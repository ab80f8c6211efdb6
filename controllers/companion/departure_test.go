package companion_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// node returns a Node's "finalizers; deleting" for assertions, or its
// error ("... not found" once it is gone).
func node(name string) func() string {
	return func() string {
		var n corev1.Node
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			return err.Error()
		}
		deleting := "live"
		if !n.DeletionTimestamp.IsZero() {
			deleting = "deleting"
		}
		return deleting + " " + fmt.Sprint(n.Finalizers)
	}
}

// nodeEvents returns "Reason: note" of the Events about a Node.
func nodeEvents(name string) func() []string {
	return func() []string {
		out, err := envtest.Events(ctx, k, "Node", name)
		if err != nil {
			return []string{err.Error()}
		}
		return out
	}
}

// deleteNode deletes a Node; the controller's finalizer may keep it.
func deleteNode(name string) {
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
}

// updateNode changes a Node, its status included.
func updateNode(name string, change func(*corev1.Node)) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			return err
		}
		change(&n)
		st := n.Status
		if err := k.Update(ctx, &n); err != nil {
			return err
		}
		n.Status = st
		return k.Status().Update(ctx, &n)
	})).To(Succeed())
}

// TestNodeDeletedWhileItsMachineRuns: a Node deleted while its machine
// runs (kubectl delete node before powering off) stays until
// kubernetes-nmstate's handler on the machine has taken its addresses off,
// and says so in an Event on the Node; only then do its record and its
// policy go. A Node no pooled policy records goes at once.
func TestNodeDeletedWhileItsMachineRuns(t *testing.T) {
	u := rolledOut(t, asIs, "nd", "10.74.0.0/24", "10.74.0.10", "10.74.0.30", "nd-1", "nd-2")
	held := addressOf("nd", "nd-2")()
	Expect(node("nd-2")()).To(Equal("live [" + ippoolv1.FinalizerPooledNode + "]"))
	// A Node recorded before this version, or stripped by hand, gets it
	// back though its policy needs no write.
	updateNode("nd-2", func(n *corev1.Node) { n.Finalizers = nil })
	Eventually(node("nd-2")).Should(Equal("live [" + ippoolv1.FinalizerPooledNode + "]"))

	u.Hold(true)
	deleteNode("nd-2")
	Eventually(nodeEvents("nd-2")).Should(ContainElement(And(HavePrefix("NodeDeletionWaits: Node nd-2 goes once kubernetes-nmstate's handler"),
		ContainSubstring("PooledNodeNetworkConfigurationPolicy nd ("+held+")"), ContainSubstring("kubectl taint node nd-2 node.kubernetes.io/out-of-service"))))
	Consistently(node("nd-2"), 2*time.Second).Should(HavePrefix("deleting"), "kept while the machine carries the address")
	Expect(u.Configured("nd-2")()).To(ConsistOf(held + "/24"))
	Expect(bits("cmp-nd")()).To(ContainElement(held))

	u.Hold(false)
	Eventually(node("nd-2")).Should(ContainSubstring("not found"))
	Expect(u.Configured("nd-2")()).To(BeEmpty(), "off the NIC before the Node went")
	Eventually(generated("nd")).Should(ConsistOf("nd-nd-1"))
	Eventually(status("nd")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))

	// A Node no pooled policy records any more goes at once.
	Expect(k.Delete(ctx, &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nd"}})).To(Succeed())
	Eventually(generated("nd")).Should(BeEmpty())
	deleteNode("nd-1")
	Eventually(node("nd-1")).Should(ContainSubstring("not found"))
}

// TestMachineShutDownForGood: a deleted Node whose machine cannot take its
// addresses off (not Ready) keeps them recorded, and the pooled policy
// says so and how out; tainted node.kubernetes.io/out-of-service, it lets
// them go, kept for its return, and goes.
func TestMachineShutDownForGood(t *testing.T) {
	// The address is kept for sd-2's return for a quarantine period: a
	// minute here, so that a busy machine's pace cannot end it before
	// sd-3 is served (the departure hold stays the suite's).
	keep := func(pc *envtest.PoolController) {
		pc.Pools.QuarantinePeriod, pc.Pools.DepartureHold = time.Minute, grace
	}
	u := rolledOut(t, keep, "sd", "10.75.0.0/24", "10.75.0.10", "10.75.0.30", "sd-1", "sd-2")
	held := addressOf("sd", "sd-2")()

	u.Hold(true) // the machine applies nothing any more
	updateNode("sd-2", notReadyNow)
	deleteNode("sd-2")
	Eventually(status("sd")).Should(And(HavePrefix("Degraded NodeDeletionWaits: Node sd-2 is being deleted and is not Ready"),
		ContainSubstring("taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")))
	Consistently(addressOf("sd", "sd-2"), 2*time.Second).Should(Equal(held))

	updateNode("sd-2", outOfService)
	Eventually(node("sd-2")).Should(ContainSubstring("not found"))
	Eventually(addressOf("sd", "sd-2")).Should(BeEmpty())
	Eventually(events("sd")).Should(ContainElement(HavePrefix("MachineShutDown: Node sd-2 is deleted and tainted node.kubernetes.io/out-of-service")))
	Eventually(generated("sd")).Should(ConsistOf("sd-sd-1"))
	Eventually(func() ([]string, error) { return envtest.KeptAddresses(ctx, k, "cmp-sd") }).Should(ContainElement(held), "kept for its return")

	u.Hold(false)
	Expect(u.AddNode("sd-3", map[string]string{"role": "sd"})).To(Succeed())
	Eventually(status("sd")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
	Expect(addressOf("sd", "sd-3")()).NotTo(Equal(held), "kept for sd-2's return while others are free")
}

// outOfService taints a Node as an admin says its machine is shut down.
func outOfService(n *corev1.Node) {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
}

// notReadyNow marks a Node not Ready, as the node lifecycle controller
// does when its kubelet stops posting.
func notReadyNow(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
		Reason: "NodeStatusUnknown", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
}

// TestNotReadyNodeHoldsNoSlot: a node that is not Ready and never gets an
// enactment (its handler is down) holds no slot of maxUnavailable: the
// other nodes are configured, and the status ignores it as
// kubernetes-nmstate does. Its release waits for it, and the status says
// so; once it is back, the release finishes.
func TestNotReadyNodeHoldsNoSlot(t *testing.T) {
	u := begin(t, "nr", "nr-1", "nr-2", "nr-3")
	createPool(t, "cmp-nr", rangeSpec("10.76.0.0/24", "10.76.0.10", "10.76.0.30"))
	u.Down("nr-2", true)
	updateNode("nr-2", notReadyNow)
	create(t, pooled("nr", "nr", "cmp-nr", "1"))
	Eventually(status("nr")).Should(Equal("Available SuccessfullyConfigured: 2/3 nodes successfully configured, 1 nodes ignored due to NotReady state"),
		describe("nr"))
	held := addressOf("nr", "nr-2")()
	Expect(held).NotTo(BeEmpty(), "recorded: its policy is written, for when it is back")

	relabel("nr-2", "elsewhere")
	Eventually(status("nr")).Should(And(HavePrefix("Degraded NodeNotReady: Node nr-2 is not Ready: "+held+" stay recorded and quarantined"),
		HaveSuffix("(2/2 nodes successfully configured)")))
	Consistently(addressOf("nr", "nr-2"), 2*time.Second).Should(Equal(held))
	Expect(bits("cmp-nr")()).To(ContainElement(held))

	updateNode("nr-2", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionTrue })
	u.Down("nr-2", false)
	Eventually(addressOf("nr", "nr-2")).Should(BeEmpty())
	Expect(u.Configured("nr-2")()).To(BeEmpty())
	Eventually(status("nr")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
	Eventually(bits("cmp-nr")).ShouldNot(ContainElement(held))
}

// TestDeletionSaysWhatItWaitsFor: a pooled policy deleted while one of its
// nodes is not Ready takes the other nodes' addresses off at once, and
// stays, Degraded NodeNotReady, with that node's address recorded and
// held, until the node is back and has taken it off.
func TestDeletionSaysWhatItWaitsFor(t *testing.T) {
	u := begin(t, "nd", "nd-1", "nd-2")
	createPool(t, "cmp-nd", rangeSpec("10.76.1.0/24", "10.76.1.10", "10.76.1.30"))
	create(t, pooled("nd", "nd", "cmp-nd", "1"))
	Eventually(status("nd")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"), describe("nd"))
	held := addressOf("nd", "nd-2")()

	u.Down("nd-2", true)
	updateNode("nd-2", notReadyNow)
	Expect(k.Delete(ctx, &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nd"}})).To(Succeed())
	Eventually(u.Configured("nd-1")).Should(BeEmpty(), "the Ready node's release does not wait")
	Eventually(status("nd")).Should(And(HavePrefix("Degraded NodeNotReady: Node nd-2 is not Ready: "+held+" stay recorded and quarantined"),
		HaveSuffix("(policy being deleted: taking its addresses off 1 nodes)")))
	Consistently(addressOf("nd", "nd-2"), 2*time.Second).Should(Equal(held))
	Expect(bits("cmp-nd")()).To(ContainElement(held))

	updateNode("nd-2", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionTrue })
	u.Down("nd-2", false)
	Eventually(func() error {
		return k.Get(ctx, client.ObjectKey{Name: "nd"}, &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
	}).Should(MatchError(ContainSubstring("not found")))
	Expect(u.Configured("nd-2")()).To(BeEmpty())
	Eventually(bits("cmp-nd")).ShouldNot(ContainElement(held))
}

// collect plays the garbage collector on a pooled policy deleted with
// propagation (envtest runs no kube-controller-manager): Foreground
// deletes its generated policies and, once they are gone, removes
// foregroundDeletion; Orphan removes their owner references, then orphan.
func collect(t *testing.T, p *ippoolv1.PooledNodeNetworkConfigurationPolicy, propagation metav1.DeletionPropagation) {
	t.Helper()
	finalizer := map[metav1.DeletionPropagation]string{metav1.DeletePropagationForeground: metav1.FinalizerDeleteDependents,
		metav1.DeletePropagationOrphan: metav1.FinalizerOrphanDependents}[propagation]
	var got ippoolv1.PooledNodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, client.ObjectKeyFromObject(p), &got)).To(Succeed())
	Expect(got.Finalizers).To(ContainElement(finalizer))
	Expect(generated(p.Name)()).NotTo(BeEmpty())
	Eventually(func() (bool, error) {
		if _, err := envtest.Collect(ctx, k, p, &nmstatev1.NodeNetworkConfigurationPolicyList{}); err != nil {
			return false, err
		}
		var got ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		return !slices.Contains(got.Finalizers, finalizer), nil
	}).Should(BeTrue(), "the garbage collector is done with %s's policies", p.Name)
}

// TestCascadingDeletions: a pooled policy deleted with
// --cascade=foreground (the garbage collector deletes its generated
// policies first) or --cascade=orphan (it strips their owner references)
// still takes every address off its nodes before its policies go, frees
// them, and goes.
func TestCascadingDeletions(t *testing.T) {
	for i, propagation := range []metav1.DeletionPropagation{metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		t.Run(string(propagation), func(t *testing.T) {
			name, pool := fmt.Sprintf("cd%d", i), fmt.Sprintf("cmp-cd%d", i)
			u := begin(t, name, name+"-1", name+"-2")
			createPool(t, pool, rangeSpec(fmt.Sprintf("10.78.%d.0/24", i), fmt.Sprintf("10.78.%d.10", i), fmt.Sprintf("10.78.%d.30", i)))
			p := pooled(name, name, pool, "100%")
			create(t, p)
			Eventually(status(name)).Should(HavePrefix("Available"))
			Expect(u.Configured(name + "-1")()).To(HaveLen(1))

			Expect(k.Delete(ctx, p, client.PropagationPolicy(propagation))).To(Succeed())
			collect(t, p, propagation)
			Eventually(generated(name)).Should(BeEmpty())
			for _, n := range []string{name + "-1", name + "-2"} {
				Expect(u.Configured(n)()).To(BeEmpty(), "%s: off the NIC before its policy went", n)
			}
			Eventually(func() error {
				return k.Get(ctx, client.ObjectKeyFromObject(p), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
			}).Should(MatchError(ContainSubstring("not found")))
			Eventually(bits(pool)).Should(BeEmpty())
			Expect(quarantined(pool)()).To(BeEmpty())
		})
	}
}

// TestNodeGoneWithoutItsFinalizer: a Node that went without the
// finalizer (deleted before this version, or stripped of it by hand), its
// enactment deleted with it by the garbage collector, is a departure: its
// record goes, its address kept for its return, and the pooled policy's
// other nodes go on.
func TestNodeGoneWithoutItsFinalizer(t *testing.T) {
	u := rolledOut(t, asIs, "ng", "10.80.0.0/24", "10.80.0.10", "10.80.0.30", "ng-1", "ng-2")
	held := addressOf("ng", "ng-2")()
	u.Down("ng-2", true) // its handler's pod goes with it
	removeNode("ng-2")
	Expect(k.DeleteAllOf(ctx, &nncev1beta1.NodeNetworkConfigurationEnactment{},
		client.MatchingLabels{shared.EnactmentNodeLabel: "ng-2"})).To(Succeed())
	Eventually(addressOf("ng", "ng-2")).Should(BeEmpty())
	Eventually(generated("ng")).Should(ConsistOf("ng-ng-1"))
	Eventually(status("ng")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
	Eventually(func() ([]string, error) { return envtest.KeptAddresses(ctx, k, "cmp-ng") }).Should(ContainElement(held))
}

// TestStrandedPoliciesGo: generated policies whose pooled policy went
// without its finalizer (stripped by hand) are let go when the garbage
// collector deletes them: nothing would ever remove their finalizer.
func TestStrandedPoliciesGo(t *testing.T) {
	rolledOut(t, asIs, "sg", "10.81.0.0/24", "10.81.0.10", "10.81.0.30", "sg-1")
	Expect(generated("sg")()).To(ConsistOf("sg-sg-1"))
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sg"}}
	Expect(k.Delete(ctx, p)).To(Succeed())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return client.IgnoreNotFound(err)
		}
		p.Finalizers = nil
		return k.Update(ctx, p)
	})).To(Succeed())
	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sg-sg-1"}})).To(Succeed())
	Eventually(generated("sg")).Should(BeEmpty())
}

// TestGeneratedPolicyDeletedByHand: a node's generated policy deleted by
// hand (kubectl delete nncp) while its node stays selected, twice, the
// second time as soon as the pool controller has created it again: each
// time the controller lets it go and creates it again, with the same
// address, which the node keeps; the pool and the record do not change,
// nothing is quarantined, and the pooled policy is Available again. The
// controller's write of one incarnation, or the late deletion event of
// another, never leaves the node waiting.
func TestGeneratedPolicyDeletedByHand(t *testing.T) {
	u := rolledOut(t, asIs, "dh", "10.85.0.0/24", "10.85.0.10", "10.85.0.30", "dh-1", "dh-2")
	address := addressOf("dh", "dh-1")()
	Expect(address).NotTo(BeEmpty())
	pool := bits("cmp-dh")()
	name := types.NamespacedName{Name: ippoolv1.NodePolicyName("dh", "dh-1")}
	for range 2 {
		var g nmstatev1.NodeNetworkConfigurationPolicy
		Expect(k.Get(ctx, name, &g)).To(Succeed())
		Expect(k.Delete(ctx, &g)).To(Succeed())
		Eventually(func(gm Gomega) {
			var now nmstatev1.NodeNetworkConfigurationPolicy
			gm.Expect(k.Get(ctx, name, &now)).To(Succeed())
			gm.Expect(now.UID).NotTo(Equal(g.UID), "created again")
			gm.Expect(now.DeletionTimestamp.IsZero()).To(BeTrue())
		}).Should(Succeed())
	}
	Eventually(status("dh")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
	Expect(addressOf("dh", "dh-1")()).To(Equal(address))
	Expect(u.Configured("dh-1")()).To(ConsistOf(address + "/24"))
	Expect(bits("cmp-dh")()).To(Equal(pool))
	Expect(quarantined("cmp-dh")()).To(BeEmpty())
}

// TestNodeWithoutStateWaits: a node that has published no
// NodeNetworkState (its handler has not yet, after a restart or a restore
// that brought its Node back without its state; or it is down) may carry
// an address all the same: it gets none until its state is published,
// and then keeps the one it carries. The pooled policy says which nodes
// wait and why; the others are served.
func TestNodeWithoutStateWaits(t *testing.T) {
	// The state of ws-2 is written within the grace period, however busy
	// the machine: never renewed.
	u := beginWith(t, func(pc *envtest.PoolController) { pc.PooledPolicies.StatelessGrace = time.Hour }, "ws", "ws-1", "ws-2", "ws-3")
	createPool(t, "cmp-ws", rangeSpec("10.76.2.0/24", "10.76.2.10", "10.76.2.30"))
	// ws-2 carries 10.76.2.20 on eth1, and its state is not published:
	// its handler has made the object and not yet written the state.
	carryWithoutState(u, "ws-2", "10.76.2.20")
	empty := recreateEmptyState("ws-2")
	// ws-3 is not Ready, and has no state either.
	u.Down("ws-3", true)
	updateNode("ws-3", notReadyNow)
	Expect(k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "ws-3"}})).To(Succeed())

	create(t, pooled("ws", "ws", "cmp-ws", "100%"))
	Eventually(status("ws")).Should(HavePrefix("Degraded NodeStateUnknown: node ws-3 published no NodeNetworkState yet; "+
		"the NodeNetworkState of node ws-2 holds no state (deleted once it has held nothing for 1h0m0s, for the handler to publish it again): "+
		"an address of NodeIPPool cmp-ws given now could replace one carried there"), describe("ws"))
	Eventually(addressOf("ws", "ws-1")).Should(Equal("10.76.2.10"))
	Consistently(addressOf("ws", "ws-2"), 2*time.Second).Should(BeEmpty(), "its state is not known")
	Expect(addressOf("ws", "ws-3")()).To(BeEmpty(), "down, and its state is not known")
	Expect(bits("cmp-ws")()).To(Equal([]string{"10.76.2.10"}))

	Expect(u.Publish("ws-2")).To(Succeed())
	Eventually(addressOf("ws", "ws-2")).Should(Equal("10.76.2.20"), "the address it carries: adopted")
	var published nncev1beta1.NodeNetworkState
	Expect(k.Get(ctx, client.ObjectKeyFromObject(empty), &published)).To(Succeed())
	Expect(published.UID).To(Equal(empty.UID), "a state written within the grace period: the object is never deleted")
	Eventually(u.Configured("ws-2")).Should(Equal([]string{"10.76.2.20/24"}))
	Eventually(status("ws")).Should(HavePrefix("Degraded NodeStateUnknown: node ws-3 published no NodeNetworkState yet"))
	// ws-3's machine is back and its handler publishes what it carries
	// (the double publishes only what changed since it last did).
	shown, err := u.Node("ws-3").Network.Show(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(envtest.PublishState(ctx, k, "ws-3", string(shown), time.Now())).To(Succeed())
	Eventually(addressOf("ws", "ws-3")).Should(Equal("10.76.2.11"), "served once its state is known")
}

// TestStatelessStateIsRenewed: kubernetes-nmstate's handler whose create
// of its NodeNetworkState went through but whose state write did not
// writes the state only when the node's network changes: the node would
// wait for good. Once the object has held no state for the grace period
// the controller deletes that very object (a state written meanwhile
// keeps it), says so in an Event, and the handler creates it again with
// its state, as it does when it sees it deleted: the node is served, with
// the address it carries.
func TestStatelessStateIsRenewed(t *testing.T) {
	u := beginWith(t, func(pc *envtest.PoolController) { pc.PooledPolicies.StatelessGrace = 2 * time.Second }, "sl", "sl-1", "sl-2", "sl-3")
	createPool(t, "cmp-sl", rangeSpec("10.76.3.0/24", "10.76.3.10", "10.76.3.30"))
	n := carryWithoutState(u, "sl-2", "10.76.3.20")
	empty := recreateEmptyState("sl-2")
	// sl-3's handler could not read its network: its state holds only
	// the condition that says why, which a deletion would wipe.
	failing := recreateEmptyState("sl-3")
	failing.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkStateConditionFailing, Status: corev1.ConditionTrue,
		Reason: shared.NodeNetworkStateConditionFailedToConfigure, Message: "reading the node's network state failed"}}
	Expect(k.Status().Update(ctx, failing)).To(Succeed())

	create(t, pooled("sl", "sl", "cmp-sl", "100%"))
	Eventually(status("sl")).Should(HavePrefix("Degraded NodeStateUnknown: node sl-3 published no NodeNetworkState yet; "+
		"the NodeNetworkState of node sl-2 holds no state (deleted once it has held nothing for 2s, for the handler to publish it again)"), describe("sl"))
	Eventually(addressOf("sl", "sl-1")).Should(Equal("10.76.3.10"))
	Eventually(func() error {
		return k.Get(ctx, client.ObjectKeyFromObject(empty), &nncev1beta1.NodeNetworkState{})
	}).Should(Satisfy(apierrors.IsNotFound), "the empty state deleted once the grace period passed")
	Eventually(events("sl")).Should(ContainElement(HavePrefix("NodeStateRenewed: deleted the NodeNetworkState of node sl-2, which held nothing for 2s")))
	Expect(addressOf("sl", "sl-2")()).To(BeEmpty(), "still unknown: nothing published")

	// The handler sees its state deleted and creates it with the state.
	shown, err := n.Network.Show(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(envtest.PublishState(ctx, k, "sl-2", string(shown), time.Now())).To(Succeed())
	Eventually(addressOf("sl", "sl-2")).Should(Equal("10.76.3.20"), "the address it carries: adopted")
	Eventually(status("sl")).Should(HavePrefix("Degraded NodeStateUnknown: node sl-3 published no NodeNetworkState yet"))
	var kept nncev1beta1.NodeNetworkState
	Expect(k.Get(ctx, client.ObjectKeyFromObject(failing), &kept)).To(Succeed())
	Expect(kept.UID).To(Equal(failing.UID), "a state that says why it holds none is never deleted")
	Expect(kept.Status.Conditions).To(HaveLen(1))
}

// carryWithoutState puts ip/24 on node's eth1, as its machine carries it
// before its handler has published a state, and returns the node.
func carryWithoutState(u *envtest.Upstream, node, ip string) *envtest.Node {
	n := u.Node(node)
	Expect(n.Network.Apply(ctx, []byte(`{"interfaces":[{"name":"eth1","type":"ethernet","state":"up","ipv4":{"enabled":true,"dhcp":false,"address":[{"ip":"`+
		ip+`","prefix-length":24}]}}]}`))).To(Succeed())
	Expect(n.Network.Commit(ctx)).To(Succeed())
	return n
}

// recreateEmptyState deletes node's NodeNetworkState and creates it again
// with an empty status, as a handler does before its first state write,
// and returns it.
func recreateEmptyState(node string) *nncev1beta1.NodeNetworkState {
	Expect(k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node}})).To(Succeed())
	empty := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node}}
	Eventually(func() error { return k.Create(ctx, empty) }).Should(Succeed())
	return empty
}

package pool_test

import (
	"os"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// The tests of --hold-carried-addresses, for self-allocating handlers: an
// address a node's network carries, recorded by no holder, goes to no
// other holder, whatever the pool keeps it for.

// startHoldingCarried runs a pool controller that holds carried
// addresses (--hold-carried-addresses) until the test ends, with the
// quarantine period quarantine (which caps the departure hold); 0 leaves
// the default.
func startHoldingCarried(t *testing.T, quarantine time.Duration) {
	t.Helper()
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Pools.HoldCarried = true
		if quarantine > 0 {
			pc.Pools.QuarantinePeriod = quarantine
		}
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
}

// TestAddressMovedToADeletedNodeIsHeld: with --hold-carried-addresses, an
// admin sets node gonemoved-b's address on node gonemoved-a by hand, then
// deletes gonemoved-a's Node while its machine runs (its handler held
// up), then removes gonemoved-b's policy. gonemoved-b's release is
// confirmed; the address is held for gonemoved-a, whose machine may carry
// it for the departure hold, rather than freed for a self-allocating
// handler to put on a second NIC, though gonemoved-a's Node is gone. Once
// the hold has passed it is free.
func TestAddressMovedToADeletedNodeIsHeld(t *testing.T) {
	RegisterTestingT(t)
	const hold = 15 * time.Second // the departure hold, capped by the quarantine period
	startHoldingCarried(t, hold)
	const name = "gonemoved"
	createPool(t, name, ippoolv1.IPRange{CIDR: "10.93.0.0/24", Start: "10.93.0.2", End: "10.93.0.20"})
	Eventually(available(name)).Should(HavePrefix("True"))
	dir := t.TempDir()
	addNode(t, dir, "gonemoved-b", name)
	policy := createPolicyWith(t, name, name, map[string]string{"addr": "ippool." + name + ".allocate"}, envtest.OneAddressState)
	Eventually(enactmentState("gonemoved-b." + name)).Should(HavePrefix("Available"))
	Expect(held("gonemoved-b."+name, name)).To(Equal([]string{"10.93.0.2"}))

	carrier := carryingNode(t, dir, "gonemoved-a", "not-"+name, "10.93.0.2", false)
	Eventually(func() string { return nodeStateOf("gonemoved-a") }).Should(ContainSubstring("10.93.0.2"))
	resume := carrier.Network.Stall()
	defer resume()
	var node corev1.Node
	Expect(k.Get(ctx, types.NamespacedName{Name: "gonemoved-a"}, &node)).To(Succeed())
	Expect(k.Delete(ctx, &node)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k.Get(ctx, types.NamespacedName{Name: "gonemoved-a"}, &corev1.Node{}))
	}).Should(BeTrue())
	deleted := time.Now()

	deleteObject(policy)
	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus(name).Quarantined }).Should(ConsistOf(
		And(HaveField("IP", "10.93.0.2"), HaveField("Node", "gonemoved-a"), HaveField("HolderName()", ""))),
		"held for the machine of the deleted Node")
	Expect(time.Since(deleted)).To(BeNumerically("<", hold), "held within the departure hold")
	Expect(bits(name)).To(Equal([]string{"10.93.0.2"}))
	Eventually(func() []string { return bits(name) }, 2*hold+30*time.Second).Should(BeEmpty(), "free once the departure hold has passed")
}

// TestStateOfADeletedNodeIsHeld: with --hold-carried-addresses, a state
// that shows a free address of the pool is seen only after its Node was
// deleted (published just before, and the watch behind; the machine may
// still run and carry it). The address is held for that node for the
// departure hold, as what it showed while its Node lived would have
// been, so no self-allocating handler takes it; then it is free.
func TestStateOfADeletedNodeIsHeld(t *testing.T) {
	RegisterTestingT(t)
	const hold = 15 * time.Second // the departure hold, capped by the quarantine period
	startHoldingCarried(t, hold)
	createPool(t, "lategone", ippoolv1.IPRange{CIDR: "10.59.0.0/24", Start: "10.59.0.1", End: "10.59.0.4"})
	Eventually(available("lategone")).Should(HavePrefix("True"))

	node := newNode("lategonehost", "none")
	Expect(k.Create(ctx, node)).To(Succeed())
	Expect(k.Delete(ctx, node)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k.Get(ctx, types.NamespacedName{Name: node.Name}, &corev1.Node{}))
	}).Should(BeTrue())
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	Expect(k.Create(ctx, nns)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, nns) })
	nns.Status.CurrentState = shared.NewState(`{"interfaces":[{"name":"eth1","ipv4":{"address":[{"ip":"10.59.0.1","prefix-length":24}]}}]}`)
	nns.Status.LastSuccessfulUpdateTime = metav1.Now()
	Expect(k.Status().Update(ctx, nns)).To(Succeed())
	shown := time.Now()

	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus("lategone").Quarantined }).Should(ConsistOf(
		And(HaveField("IP", "10.59.0.1"), HaveField("Node", node.Name), HaveField("HolderName()", ""))),
		"held for the machine of the deleted Node")
	Expect(time.Since(shown)).To(BeNumerically("<", hold), "held within the departure hold")
	Eventually(func() []string { return bits("lategone") }, 2*hold+30*time.Second).Should(BeEmpty(), "free once the departure hold has passed")
}

func quarantined(s *ippoolv1.NodeIPPoolStatus, ip string) *ippoolv1.QuarantinedAddress {
	return poolstatus.QuarantineOf(&ippoolv1.NodeIPPool{Status: *s}, ip)
}

// TestKeptAddressCarriedElsewhereIsNotReturned: with
// --hold-carried-addresses, a node whose Node was deleted has its address
// kept for its return; meanwhile an admin sets that address on another
// node by hand. The pool takes it from the return, with an Event, so the
// node that comes back under its name (reinstalled), whose
// handler allocates itself without reading what other nodes carry, gets
// another address rather than putting it on a second NIC.
func TestKeptAddressCarriedElsewhereIsNotReturned(t *testing.T) {
	RegisterTestingT(t)
	startHoldingCarried(t, 10*time.Minute)
	const pool, first = "unreturned", "10.63.0.1"
	createPool(t, pool, ippoolv1.IPRange{CIDR: "10.63.0.0/24", Start: first, End: "10.63.0.9"})
	Eventually(available(pool)).Should(HavePrefix("True"))
	createPolicy(t, pool, pool, pool)
	dir := t.TempDir()
	node, enactment := pool+"01", pool+"01."+pool
	selfAllocate := func(nd *envtest.Node) { nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = true } }
	leaving := addNodeWith(t, dir, node, pool, selfAllocate)
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	Expect(held(enactment, pool)).To(Equal([]string{first}))
	Eventually(func() string { return nodeStateOf(node) }).Should(ContainSubstring(first))
	Expect(k.Delete(ctx, newNode(node, pool))).To(Succeed())
	Eventually(enactmentGone(enactment)).Should(BeTrue())
	Expect(leaving.Stop()).To(Succeed())
	Eventually(func() []ippoolv1.KeptAddress { return poolStatus(pool).KeptForReturn }).Should(ConsistOf(
		And(HaveField("IP", first), HaveField("HolderName()", enactment))))

	intruder := carryingNode(t, dir, pool+"-by-hand", "not-"+pool, first, false)
	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus(pool).Quarantined }).Should(ConsistOf(
		And(HaveField("IP", first), HaveField("Node", node), HaveField("HolderName()", enactment), HaveField("Capture", ""))),
		"quarantined again as the departed node's release, to be returned to no one")
	Expect(poolStatus(pool).KeptForReturn).To(BeEmpty())
	Expect(bits(pool)).To(Equal([]string{first}))
	Eventually(events("NodeIPPool", pool)).Should(ContainElement(HavePrefix(
		"AddressQuarantined: Taken from the returns they were kept for: " + first + " on node " + pool + "-by-hand (kept for the return of " +
			enactment + ")")))

	// It comes back reinstalled: its network carries nothing of the pool.
	back := addNodeWith(t, t.TempDir(), node, pool, selfAllocate)
	nics := envtest.SampleNICs(t, intruder, back)
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	Expect(held(enactment, pool)).To(Equal([]string{"10.63.0.2"}), "another address: the other node carries its old one")
	Consistently(nics.OnTwoNICs, 2*time.Second).Should(BeEmpty())
	assertIndexed(pool)
}

// TestQuarantinedAddressCarriedElsewhereIsNotReturned: with
// --hold-carried-addresses, an admin sets a self-allocating node's
// address on another node by hand, then deletes the policy; the node's
// network refuses every apply, so its release stays quarantined for its
// return.
// The other node publishes nothing new, yet the pool's next look at its
// quarantines takes the address from that return. The policy created
// again gives the node another address, and its network, once it answers,
// takes the old one off: one address, one NIC, from then on.
func TestQuarantinedAddressCarriedElsewhereIsNotReturned(t *testing.T) {
	RegisterTestingT(t)
	startHoldingCarried(t, 10*time.Minute)
	const pool, first = "unreturnedq", "10.63.1.1"
	createPool(t, pool, ippoolv1.IPRange{CIDR: "10.63.1.0/24", Start: first, End: "10.63.1.9"})
	Eventually(available(pool)).Should(HavePrefix("True"))
	policy := createPolicyWith(t, pool, pool, map[string]string{"addr": "ippool." + pool + ".allocate"}, envtest.OneAddressState)
	dir := t.TempDir()
	node, enactment := pool+"01", pool+"01."+pool
	nd := addNodeWith(t, dir, node, pool, func(nd *envtest.Node) { nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = true } })
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	Expect(held(enactment, pool)).To(Equal([]string{first}))
	intruder := carryingNode(t, dir, pool+"-by-hand", "not-"+pool, first, false)
	Eventually(func() string { return nodeStateOf(pool + "-by-hand") }).Should(ContainSubstring(first))

	// Its network refuses every apply meanwhile (NetworkManager not
	// answering): the release cannot take the address off.
	failing := nd.State + ".fail"
	Expect(os.WriteFile(failing, []byte("apply: NetworkManager is not answering (simulated)\n"), 0o600)).To(Succeed())
	t.Cleanup(func() { _ = os.Remove(failing) })
	deleteObject(policy)
	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus(pool).Quarantined }).Should(ConsistOf(
		And(HaveField("IP", first), HaveField("Node", node), HaveField("HolderName()", enactment), HaveField("Capture", ""))),
		"its release stays quarantined, to be returned to no one")
	Eventually(events("NodeIPPool", pool)).Should(ContainElement(HavePrefix(
		"AddressQuarantined: Taken from the returns they were kept for: " + first + " on node " + pool + "-by-hand (quarantined for the return of " +
			enactment + ")")))

	createPolicyWith(t, pool, pool, map[string]string{"addr": "ippool." + pool + ".allocate"}, envtest.OneAddressState)
	Eventually(func() []string { return held(enactment, pool) }).Should(Equal([]string{"10.63.1.2"}),
		"another address: another node carries its old one")
	Expect(os.Remove(failing)).To(Succeed())
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	Eventually(carried(nd)).Should(Equal([]string{"10.63.1.2/24"}), "the old address, set on the other node by hand too, is off")
	nics := envtest.SampleNICs(t, intruder, nd)
	Consistently(carried(nd), 2*time.Second).Should(Equal([]string{"10.63.1.2/24"}))
	Expect(carried(intruder)()).To(Equal([]string{first + "/24"}))
	Expect(nics.OnTwoNICs()).To(BeEmpty())
	assertIndexed(pool)
}

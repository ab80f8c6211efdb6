package pool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/retire"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// The tests of this file reproduce, each, a way an address ended up on two
// nodes before the pool status was stamped, fenced and quarantined.

// startControllerWith runs a pool controller with a quarantine period of
// its own until the test ends.
func startControllerWith(t *testing.T, quarantine time.Duration) {
	t.Helper()
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) { pc.Pools.QuarantinePeriod = quarantine })
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
}

func poolStatus(name string) ippoolv1.NodeIPPoolStatus {
	var p ippoolv1.NodeIPPool
	if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		return ippoolv1.NodeIPPoolStatus{}
	}
	return p.Status
}

// TestEmptiedBitmapWaitsForRebuild: the specification's own repair step,
// emptying status.allocatedOffsets by hand, while no pool controller runs.
// A node that joins then must not be handed an address another node holds:
// it waits, Pending, until the controller has rebuilt the pool from the
// enactments.
func TestEmptiedBitmapWaitsForRebuild(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t, nil)
	createPool(t, "emptied", ippoolv1.IPRange{CIDR: "10.50.0.0/24"})
	Eventually(available("emptied")).Should(HavePrefix("True"))
	createPolicy(t, "emptied", "emptied", "emptied")
	for _, nd := range newNodes(t, "emptied", 2) {
		Eventually(enactmentState(nd.Name + ".emptied")).Should(HavePrefix("Available"))
	}
	held01 := held("emptied01.emptied", "emptied")
	stop()
	setBits("emptied") // emptied by hand, as seed 002 says to
	addNode(t, t.TempDir(), "emptied03", "emptied")
	Eventually(enactmentState("emptied03.emptied")).Should(ContainSubstring(
		`Pending: NodeIPPool "emptied": new addresses wait until the pool controller has rebuilt the pool from its holders' records`))
	Consistently(func() []string { return held("emptied03.emptied", "emptied") }, 2*time.Second).Should(BeEmpty())

	startController(t, nil)
	Eventually(enactmentState("emptied03.emptied")).Should(HavePrefix("Available"))
	Expect(held("emptied03.emptied", "emptied")).NotTo(ContainElement(held01[0]))
	Eventually(events("NodeIPPool", "emptied")).Should(ContainElement(HavePrefix("UnvouchedStatus: Rebuilt from the holders' records")))
	assertIndexed("emptied")
}

// TestOlderPoolDeletedNewerKeepsOff: pool "older" is in use; "newer"
// overlaps it and is refused. Deleting "older", the first step of
// re-creating it larger, opens "newer", which must not hand out the
// addresses older's nodes still record and carry.
func TestOlderPoolDeletedNewerKeepsOff(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "older", ippoolv1.IPRange{CIDR: "10.52.0.0/28"})
	Eventually(available("older")).Should(HavePrefix("True"))
	createPolicy(t, "older", "older", "older")
	var olds []string
	for _, nd := range newNodes(t, "older", 3) {
		Eventually(enactmentState(nd.Name + ".older")).Should(HavePrefix("Available"))
		olds = append(olds, held(nd.Name+".older", "older")...)
	}
	// Creation times count in seconds: a pool created within the second of
	// "older" would tie, and the tie goes by name.
	laterSecond(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "older"}})
	createPool(t, "newer", ippoolv1.IPRange{CIDR: "10.52.0.0/27"})
	Eventually(available("newer")).Should(HavePrefix("False OverlappingIPPool"))
	createPolicy(t, "newer", "newer", "newer")
	newer := newNodes(t, "newer", 3)
	Eventually(enactmentState("newer01.newer")).Should(HavePrefix("Pending"))

	deleteObject(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "older"}})
	Eventually(available("newer")).Should(HavePrefix("True ReconciledPool"))
	for _, nd := range newer {
		Eventually(enactmentState(nd.Name + ".newer")).Should(HavePrefix("Available"))
		Expect(held(nd.Name+".newer", "newer")).NotTo(ContainElement(BeElementOf(olds)))
	}
	Expect(bits("newer")).To(ContainElements(olds), "the newer pool indexes what the older pool's holders record")
	Expect(envtest.RecordedAddresses(ctx, k, "older")).To(ConsistOf(olds), "the holders keep their addresses")
}

// TestCollisionAcrossPools: two enactments record one address under two
// pool names; the pool whose range holds it says so, naming both pools.
func TestCollisionAcrossPools(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "across", ippoolv1.IPRange{CIDR: "10.53.0.0/24"})
	claim(t, "x1.p", "gone-pool", "10.53.0.5")
	claim(t, "x2.p", "across", "10.53.0.5")
	Eventually(available("across")).Should(Equal("False IPCollision: The IP address 10.53.0.5 at node ? (enactment x1.p, NodeIPPool gone-pool) " +
		"is colliding with node ? (enactment x2.p); reset all but one holder, e.g. kubectl annotate nnce x2.p nmstate.io/reset-ippool=across"))
}

// TestResetWhileHolderStalled: an enactment is reset while its node's
// handler is stalled, so the node still carries the address. No node that
// joins meanwhile is handed it; once the holder applies its new address
// and publishes its state, the old one is freed before the quarantine
// period ends.
func TestResetWhileHolderStalled(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, 10*time.Minute)
	createPool(t, "stall", ippoolv1.IPRange{CIDR: "10.54.0.0/24", Start: "10.54.0.1", End: "10.54.0.4"})
	Eventually(available("stall")).Should(HavePrefix("True"))
	createPolicy(t, "stall", "stall", "stall")
	holder := addNodeWith(t, t.TempDir(), "stall01", "stall", func(*envtest.Node) {})
	Eventually(enactmentState("stall01.stall")).Should(HavePrefix("Available"))
	old := held("stall01.stall", "stall")
	Expect(old).To(Equal([]string{"10.54.0.1"}))
	Expect(holder.Stop()).To(Succeed()) // stalled: it carries the address and does nothing

	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "stall01.stall"}}
	annotate(e, "stall")
	Eventually(func() []string { return held("stall01.stall", "stall") }).Should(BeEmpty())
	Eventually(func() *ippoolv1.QuarantinedAddress { s := poolStatus("stall"); return quarantined(&s, "10.54.0.1") }).
		ShouldNot(BeNil())
	joiner := addNode(t, t.TempDir(), "stall02", "stall")
	Eventually(enactmentState("stall02.stall")).Should(HavePrefix("Available"))
	Expect(held("stall02.stall", "stall")).To(Equal([]string{"10.54.0.2"}), "the quarantined address is handed to nobody")
	Expect(holder.Configured("eth1")).To(Equal("10.54.0.1/24"), "the stalled holder still carries it")
	Expect(joiner.Configured("eth1")).To(Equal("10.54.0.2/24"))

	Expect(holder.Start(env)).To(Succeed())
	Eventually(enactmentState("stall01.stall")).Should(HavePrefix("Available"))
	Eventually(events("NodeIPPool", "stall")).Should(ContainElement(
		"QuarantineLifted: Freed quarantined 10.54.0.1 (node stall01 showed it gone)"),
		"freed once the holder's published state no longer carries it, long before the quarantine period")
	// The holder's new address: .3 if it was served before the old one
	// came off, or .1 again, the lowest free, once it was off and freed.
	Eventually(func() []string { return held("stall01.stall", "stall") }).Should(ConsistOf(BeElementOf("10.54.0.1", "10.54.0.3")))
	now := held("stall01.stall", "stall")
	Eventually(holder.Configured).WithArguments("eth1").Should(Equal(now[0] + "/24"))
	Eventually(bits).WithArguments("stall").Should(ConsistOf("10.54.0.2", now[0]))
	Expect(joiner.Configured("eth1")).To(Equal("10.54.0.2/24"))
	assertIndexed("stall")
}

// TestResetOnEmptiedBitmap: an enactment reset while the pool's bitmap was
// emptied by hand (found by the chaos suite): the dropped address is
// quarantined all the same, and the rebuild that follows keeps it, so a
// node that joins is not handed what the stalled holder still carries.
func TestResetOnEmptiedBitmap(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t, nil)
	createPool(t, "wiped", ippoolv1.IPRange{CIDR: "10.57.0.0/24", Start: "10.57.0.1", End: "10.57.0.4"})
	Eventually(available("wiped")).Should(HavePrefix("True"))
	createPolicy(t, "wiped", "wiped", "wiped")
	holder := addNode(t, t.TempDir(), "wiped01", "wiped")
	Eventually(enactmentState("wiped01.wiped")).Should(HavePrefix("Available"))
	Expect(held("wiped01.wiped", "wiped")).To(Equal([]string{"10.57.0.1"}))
	Expect(holder.Stop()).To(Succeed())
	stop()

	setBits("wiped")
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "wiped01.wiped"}}, "wiped")
	startControllerWith(t, 10*time.Minute)
	Eventually(func() []string { return held("wiped01.wiped", "wiped") }).Should(BeEmpty())
	Eventually(available("wiped")).Should(HavePrefix("True"))
	Expect(bits("wiped")).To(Equal([]string{"10.57.0.1"}), "quarantined, so kept by the rebuild")
	addNode(t, t.TempDir(), "wiped02", "wiped")
	Eventually(enactmentState("wiped02.wiped")).Should(HavePrefix("Available"))
	Expect(held("wiped02.wiped", "wiped")).To(Equal([]string{"10.57.0.2"}))
	Expect(holder.Configured("eth1")).To(Equal("10.57.0.1/24"))
}

// TestCarriedButUnrecordedIsQuarantined: a node's network carries an
// address of the pool that no holder records (its pool was deleted with
// its quarantine list, as when a pool is re-created). The rebuild
// quarantines it, so no node that joins is handed it.
func TestCarriedButUnrecordedIsQuarantined(t *testing.T) {
	RegisterTestingT(t)
	Expect(k.Create(ctx, newNode("strayhost", "none"))).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, newNode("strayhost", "none")) })
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "strayhost"}}
	Expect(k.Create(ctx, nns)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, nns) })
	nns.Status.CurrentState = shared.NewState(`{"interfaces":[{"name":"eth1","ipv4":{"address":[{"ip":"10.58.0.1","prefix-length":24}]}}]}`)
	nns.Status.LastSuccessfulUpdateTime = metav1.NewTime(time.Now().Add(-time.Hour))
	Expect(k.Status().Update(ctx, nns)).To(Succeed())

	startControllerWith(t, 10*time.Minute)
	createPool(t, "stray", ippoolv1.IPRange{CIDR: "10.58.0.0/24", Start: "10.58.0.1", End: "10.58.0.4"})
	Eventually(available("stray")).Should(HavePrefix("True"))
	Expect(bits("stray")).To(Equal([]string{"10.58.0.1"}))
	Eventually(events("NodeIPPool", "stray")).Should(ContainElement(
		"AddressQuarantined: Quarantined 10.58.0.1 on node strayhost: carried by a node's network but recorded by no holder " +
			"(its pool was deleted, or a record was lost)"))
	createPolicy(t, "stray", "stray", "stray")
	addNode(t, t.TempDir(), "stray01", "stray")
	Eventually(enactmentState("stray01.stray")).Should(HavePrefix("Available"))
	Expect(held("stray01.stray", "stray")).To(Equal([]string{"10.58.0.2"}))
}

// TestStalledAllocationIsRevoked: a handler stalls between taking an
// address and recording it for longer than the grace period. The pool
// controller fences its enactment and frees the address, another node
// takes it, and the stalled handler, when it wakes up, finds its record
// refused, applies nothing of it and allocates again.
func TestStalledAllocationIsRevoked(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "revoke", ippoolv1.IPRange{CIDR: "10.55.0.0/24", Start: "10.55.0.1", End: "10.55.0.2"})
	Eventually(available("revoke")).Should(HavePrefix("True"))
	createPolicy(t, "revoke", "revoke", "revoke")
	var resume func()
	stalled := addNodeWith(t, t.TempDir(), "revoke01", "revoke", func(nd *envtest.Node) {
		resume = nd.Network.Stall()
		// It takes the address itself, so that it stalls holding it.
		nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = true }
	})
	t.Cleanup(resume)
	Eventually(func() []ippoolv1.InFlightAddress { return poolStatus("revoke").InFlight }).Should(ContainElement(
		HaveField("IP", "10.55.0.1")))
	Eventually(events("NodeIPPool", "revoke"), grace*5).Should(ContainElement(HavePrefix("AllocationRevoked: Freed 10.55.0.1")))
	var fenced nncev1beta1.NodeNetworkConfigurationEnactment
	Expect(k.Get(ctx, types.NamespacedName{Name: "revoke01.revoke"}, &fenced)).To(Succeed())
	Expect(fenced.Annotations).To(HaveKeyWithValue(ippoolv1.FenceAnnotation, HavePrefix("revoke/10.55.0.1@")))

	addNode(t, t.TempDir(), "revoke02", "revoke")
	Eventually(enactmentState("revoke02.revoke")).Should(HavePrefix("Available"))
	Expect(held("revoke02.revoke", "revoke")).To(Equal([]string{"10.55.0.1"}))

	resume()
	Eventually(enactmentState("revoke01.revoke")).Should(HavePrefix("Available"))
	Expect(held("revoke01.revoke", "revoke")).To(Equal([]string{"10.55.0.2"}))
	Expect(stalled.Configured("eth1")).To(Equal("10.55.0.2/24"), "the revoked address never reached the stalled node")
	Expect(stalled.Network.Applies.Load()).To(BeEquivalentTo(1))
	Eventually(events("NodeNetworkConfigurationEnactment", "revoke01.revoke")).Should(ContainElement(
		"AllocationRevoked: NodeIPPool revoke revoked 10.55.0.1 before node revoke01 recorded it " +
			"(the handler stalled past the grace period); not applied, allocating again"))
	assertIndexed("revoke")
}

// TestWithdrawKeepsToItsIncarnation: an address taken in one incarnation
// of a pool and given back after the pool was re-created, where another
// enactment now holds it, is left alone: a withdrawal clears only bits
// whose in-flight entry it owns.
func TestWithdrawKeepsToItsIncarnation(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	spec := ippoolv1.IPRange{CIDR: "10.56.0.0/24"}
	createPool(t, "incarnation", spec)
	Eventually(available("incarnation")).Should(HavePrefix("True"))
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	_, err := w.Update(ctx, "incarnation", func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.56.0.1", Holder: "x.p", Token: "1", Since: metav1.Now()})
		return true, alloc.AllocateIP(mustAddr("10.56.0.1"))
	})
	Expect(err).NotTo(HaveOccurred())

	deleteObject(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "incarnation"}})
	createPool(t, "incarnation", spec)
	claim(t, "y.p", "incarnation", "10.56.0.1")
	Eventually(bits).WithArguments("incarnation").Should(Equal([]string{"10.56.0.1"}))
	withdrawn, err := w.Withdraw(ctx, "incarnation", "x.p", "1", []string{"10.56.0.1"})
	Expect(err).NotTo(HaveOccurred())
	Expect(withdrawn).To(BeEmpty())
	Consistently(bits).WithArguments("incarnation").Should(Equal([]string{"10.56.0.1"}))
}

// TestInvalidIPPool: a range that passes admission but hands out nothing
// (every address excluded) is refused with a condition and an Event.
func TestInvalidIPPool(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "allgone", ippoolv1.IPRange{CIDR: "10.59.0.0/29", Start: "10.59.0.1", End: "10.59.0.2", Exclude: []string{"10.59.0.0/30"}})
	Eventually(available("allgone")).Should(HavePrefix("False InvalidIPPool: The range cannot hand out addresses: "))
	Eventually(events("NodeIPPool", "allgone")).Should(ContainElement(HavePrefix("InvalidIPPool: ")))
}

// TestUnreadableBitmap: a status.allocatedOffsets that cannot be decoded is
// discarded, with an Event, and the pool rebuilt from the holders' records.
func TestUnreadableBitmap(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "garbled", ippoolv1.IPRange{CIDR: "10.60.0.0/24"})
	claim(t, "g1.p", "garbled", "10.60.0.7")
	Eventually(bits).WithArguments("garbled").Should(Equal([]string{"10.60.0.7"}))
	Eventually(func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "garbled"}, &p); err != nil {
			return err
		}
		p.Status.AllocatedOffsets = "not a snapshot"
		return k.Status().Update(ctx, &p)
	}).Should(Succeed())
	Eventually(events("NodeIPPool", "garbled")).Should(ContainElement(HavePrefix(
		"UnsyncronizedIPPool: Discarded an unreadable status.allocatedOffsets")))
	Eventually(bits).WithArguments("garbled").Should(Equal([]string{"10.60.0.7"}))
	Eventually(available("garbled")).Should(HavePrefix("True ReconciledPool"))
}

// TestConcurrentRetirers: two retirers retire one enactment at the same
// moment (the enactment names no node, so the pool controller leaves it
// to them); its address has one quarantine, and at most one of them
// reports it. Both may see their removal of the finalizer succeed: the
// API server drops a deleted object whose last finalizer goes without a
// new resourceVersion, so two removals read at the same one both pass.
func TestConcurrentRetirers(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "twice", ippoolv1.IPRange{CIDR: "10.61.0.0/24"})
	Eventually(available("twice")).Should(HavePrefix("True"))
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "gone.p",
		Finalizers: []string{ippoolv1.FinalizerIPPool}}}
	Expect(k.Create(ctx, e)).To(Succeed())
	e.Status.IPPool = ippoolv1.EnactmentIPPools{"twice": {Allocated: []string{"10.61.0.9"}}}
	Expect(k.Status().Update(ctx, e)).To(Succeed())
	Eventually(bits).WithArguments("twice").Should(Equal([]string{"10.61.0.9"}))

	// The audit trail of both retirers' writes counts the quarantines:
	// the controller lifts this one soon after (the holder has no node),
	// so the pool's status cannot be asked afterwards.
	var quarantines atomic.Int32
	results := make(chan ippoolv1.EnactmentIPPools, 2)
	for range 2 {
		go func() {
			w := poolwrite.NewWriter(k, k, clock.RealClock{})
			w.Audit = func(_ context.Context, changes []audit.Change) {
				for _, c := range changes {
					if c.Event == audit.Quarantined && c.Address.String() == "10.61.0.9" {
						quarantines.Add(1)
					}
				}
			}
			q, err := retire.Retire(ctx, w, e.DeepCopy())
			Expect(err).NotTo(HaveOccurred())
			results <- q
		}()
	}
	a, b := <-results, <-results
	// Each reports what it newly quarantined: the address, or nothing
	// when the other's quarantine landed first (a quarantine is
	// idempotent) or the other removed the finalizer before it looked.
	reported := 0
	for _, q := range []ippoolv1.EnactmentIPPools{a, b} {
		Expect(q).To(Or(BeEmpty(), Equal(ippoolv1.EnactmentIPPools{"twice": {Allocated: []string{"10.61.0.9"}}})))
		if len(q) > 0 {
			reported++
		}
	}
	Expect(reported).To(BeNumerically("<=", 1), "at most one retirer reports the address")
	Expect(quarantines.Load()).To(Equal(int32(1)), "one quarantine of the address")
	Expect(len(poolStatus("twice").Quarantined)).To(BeNumerically("<=", 1), "never two entries (or none: lifted since)")
}

// TestNodeReplacedUnderItsNameGetsItsAddressBack: a Node deleted while its
// handler runs (found by make demo) has its enactment retired and its
// address quarantined. The Node is gone, its network with it: the address
// is freed at once (not after the quarantine period) and kept for the
// node's return. Another node that joins gets another one, and the node
// re-added under the same name within the quarantine period (a new Node,
// a new UID) gets its old address back, with an AddressReturned Event,
// whether the pool controller serves it or its handler allocates itself.
func TestNodeReplacedUnderItsNameGetsItsAddressBack(t *testing.T) {
	for _, tt := range []struct {
		name, pool, cidr, first string
		selfAllocate            bool
	}{
		{"served by the pool controller", "leave", "10.62.0.0/24", "10.62.0.1", false},
		{"allocated by the handler", "leave-self", "10.62.1.0/24", "10.62.1.1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			RegisterTestingT(t)
			replaceNode(t, tt.pool, tt.cidr, tt.first, tt.selfAllocate)
		})
	}
}

func replaceNode(t *testing.T, pool, cidr, first string, selfAllocate bool) {
	startControllerWith(t, 10*time.Minute)
	createPool(t, pool, ippoolv1.IPRange{CIDR: cidr})
	Eventually(available(pool)).Should(HavePrefix("True"))
	createPolicy(t, pool, pool, pool)
	dir := t.TempDir()
	node, other, enactment := pool+"01", pool+"02", pool+"01."+pool
	tune := func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = selfAllocate }
	}
	leaving := addNodeWith(t, dir, node, pool, func(*envtest.Node) {})
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	Expect(held(enactment, pool)).To(Equal([]string{first}))
	Eventually(func() string {
		var nns nncev1beta1.NodeNetworkState
		_ = k.Get(ctx, types.NamespacedName{Name: node}, &nns)
		return string(nns.Status.CurrentState.Raw)
	}).Should(ContainSubstring(first))

	Expect(k.Delete(ctx, newNode(node, pool))).To(Succeed())
	Eventually(enactmentGone(enactment)).Should(BeTrue())
	Expect(leaving.Stop()).To(Succeed())
	Eventually(func() []ippoolv1.KeptAddress { return poolStatus(pool).KeptForReturn }).Should(ConsistOf(
		And(HaveField("IP", first), HaveField("HolderName()", enactment), HaveField("Capture", "addr"), HaveField("Node", node))))
	Expect(poolStatus(pool).Quarantined).To(BeEmpty())
	Expect(bits(pool)).To(BeEmpty(), "free: the Node is gone, and its network with it")

	addNodeWith(t, dir, other, pool, tune)
	Eventually(enactmentState(other + "." + pool)).Should(HavePrefix("Available"))
	Expect(held(other+"."+pool, pool)).NotTo(ContainElement(first), "another node gets another address")

	// The node comes back under its name: a new Node object, a new UID.
	addNodeWith(t, dir, node, pool, tune)
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	Expect(held(enactment, pool)).To(Equal([]string{first}), "the old address comes back")
	Eventually(func() []ippoolv1.KeptAddress { return poolStatus(pool).KeptForReturn }).Should(BeEmpty())
	Eventually(events("NodeNetworkConfigurationEnactment", enactment)).Should(ContainElement(
		HavePrefix("AddressReturned: NodeIPPool " + pool + " returned " + first + " to capture addr (kept since ")))
	assertIndexed(pool)
}

// TestKeptAddressExpires: an address kept for a deleted node's return is
// passed by while other addresses are free, and once the quarantine period
// has passed since its release it is an address like any other. The
// controller finds the Node gone in a list of Nodes (TestScaleDown, by
// reading it).
func TestKeptAddressExpires(t *testing.T) {
	RegisterTestingT(t)
	const period = 15 * time.Second
	metrics := pool.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	// One quarantined address is enough to look the Nodes up with a list.
	pc, err := env.StartPoolController(grace, metrics, func(pc *envtest.PoolController) {
		pc.Pools.QuarantinePeriod, pc.Pools.ListNodesFrom = period, 1
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	createPool(t, "expire", ippoolv1.IPRange{CIDR: "10.64.0.0/24", Start: "10.64.0.1", End: "10.64.0.10"})
	Eventually(available("expire")).Should(HavePrefix("True"))
	createPolicy(t, "expire", "expire", "expire")
	dir := t.TempDir()
	leaving := addNode(t, dir, "expire01", "expire")
	Eventually(enactmentState("expire01.expire")).Should(HavePrefix("Available"))
	Expect(held("expire01.expire", "expire")).To(Equal([]string{"10.64.0.1"}))

	Expect(leaving.Stop()).To(Succeed())
	Expect(k.Delete(ctx, newNode("expire01", "expire"))).To(Succeed())
	Eventually(func() []ippoolv1.KeptAddress { return poolStatus("expire").KeptForReturn }).Should(ConsistOf(HaveField("IP", "10.64.0.1")))
	Eventually(metric(registry, "nmstate_ippool_kept_for_return_addresses", "expire")).Should(Equal(1.0))
	addNode(t, dir, "expire02", "expire")
	Eventually(enactmentState("expire02.expire")).Should(HavePrefix("Available"))
	Expect(held("expire02.expire", "expire")).To(Equal([]string{"10.64.0.2"}), "a kept address is passed by while others are free")

	Eventually(func() []ippoolv1.KeptAddress { return poolStatus("expire").KeptForReturn }, 2*period).Should(BeEmpty())
	Eventually(metric(registry, "nmstate_ippool_kept_for_return_addresses", "expire")).Should(Equal(0.0))
	addNode(t, dir, "expire03", "expire")
	Eventually(enactmentState("expire03.expire")).Should(HavePrefix("Available"))
	Expect(held("expire03.expire", "expire")).To(Equal([]string{"10.64.0.1"}), "once expired, the lowest free address again")
	assertIndexed("expire")
}

package pool_test

import (
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestPolicyDeletedAddressesLeaveTheNIC is the first scenario of the
// Evidence issue: a pooled policy is deleted. Its nodes take their
// addresses off the NIC (kubernetes-nmstate would leave them), and the
// pool frees them only once the nodes' published states show them gone.
// Nodes that get a policy from the same pool next get them, and no address
// is ever on two NICs. The pool controller reads the nodes' states one by
// one, and, as with many quarantines (ListNodesFrom, ListStatesFrom), in
// one list: a list that gave no node's state would leave the addresses
// quarantined.
func TestPolicyDeletedAddressesLeaveTheNIC(t *testing.T) {
	for _, tc := range []struct {
		how, name, subnet string
		listFrom          int
	}{
		{"states read one by one", "gone", "10.70.0", 0},
		{"states listed once", "gonelist", "10.70.1", 1},
	} {
		t.Run(tc.how, func(t *testing.T) {
			RegisterTestingT(t)
			pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
				pc.Pools.ListNodesFrom, pc.Pools.ListStatesFrom = tc.listFrom, tc.listFrom
			})
			Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = pc.Stop() })
			policyDeletedLeavesTheNIC(t, tc.name, tc.subnet)
		})
	}
}

func policyDeletedLeavesTheNIC(t *testing.T, name, subnet string) {
	createPool(t, name, ippoolv1.IPRange{CIDR: subnet + ".0/24", Start: subnet + ".1", End: subnet + ".2"})
	Eventually(available(name)).Should(HavePrefix("True"))
	createPolicy(t, name, name, name)
	first := newNodes(t, name, 2)
	s := envtest.SampleNICs(t, first...)
	for _, nd := range first {
		Eventually(enactmentState(nd.Name + "." + name)).Should(HavePrefix("Available"))
		Expect(carried(nd)()).To(HaveLen(1))
	}

	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	for _, nd := range first {
		Eventually(carried(nd)).Should(BeEmpty(), "a released address leaves the NIC")
		Eventually(events("NodeIPPool", name)).Should(ContainElement(HavePrefix("AddressReleased: Node " + nd.Name + " took released " + subnet + ".")))
	}
	Eventually(func() []string { return bits(name) }).Should(BeEmpty())
	Eventually(events("NodeIPPool", name)).Should(ContainElement(And(HavePrefix("QuarantineLifted: Freed quarantined "+subnet+"."),
		ContainSubstring("showed it gone)"))))

	next := name + "-next"
	createPolicy(t, next, next, name)
	nodes := newNodes(t, next, 2)
	s.Watch(nodes...)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + "." + next)).Should(HavePrefix("Available"))
		Expect(carried(nd)()).To(ConsistOf(HavePrefix(subnet + ".")))
	}
	Expect(s.OnTwoNICs()).To(BeEmpty())
	assertIndexed(name)
}

// TestDeselectedNodeReleases is the second scenario: a node stops matching
// a policy's nodeSelector. It takes the address off, and the node that
// starts matching gets it only then.
func TestDeselectedNodeReleases(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "desel", ippoolv1.IPRange{CIDR: "10.71.0.0/24", Start: "10.71.0.1", End: "10.71.0.1"})
	Eventually(available("desel")).Should(HavePrefix("True"))
	createPolicy(t, "desel", "desel", "desel")
	nodes := newNodes(t, "desel", 1)
	other := addNode(t, t.TempDir(), "desel-other", "not-yet")
	s := envtest.SampleNICs(t, nodes[0], other)
	Eventually(enactmentState("desel01.desel")).Should(HavePrefix("Available"))
	Expect(carried(nodes[0])()).To(Equal([]string{"10.71.0.1/24"}))

	relabel("desel01", "elsewhere")
	relabel("desel-other", "desel")
	Eventually(enactmentState("desel-other.desel")).Should(HavePrefix("Available"))
	Expect(carried(other)()).To(Equal([]string{"10.71.0.1/24"}))
	Expect(carried(nodes[0])()).To(BeEmpty())
	Expect(s.OnTwoNICs()).To(BeEmpty())
	assertIndexed("desel")
}

// relabel sets a node's role label.
func relabel(node, role string) {
	Eventually(func() error {
		var n corev1.Node
		if err := k.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			return err
		}
		n.Labels["role"] = role
		return k.Update(ctx, &n)
	}).Should(Succeed())
}

// TestQuarantineOutlivesItsPeriod: a node that cannot take a released
// address off (its applies fail) keeps it quarantined past the quarantine
// period: the pool says which node still carries it on which interface,
// with a Warning, and nobody is handed it. Once the node can apply again,
// the controller's next request for its state makes it take the address
// off, and only then does another node get it.
func TestQuarantineOutlivesItsPeriod(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "outlive", ippoolv1.IPRange{CIDR: "10.72.0.0/24", Start: "10.72.0.1", End: "10.72.0.1"})
	Eventually(available("outlive")).Should(HavePrefix("True"))
	createPolicy(t, "outlive", "outlive", "outlive")
	holder := newNodes(t, "outlive", 1)[0]
	Eventually(enactmentState("outlive01.outlive")).Should(HavePrefix("Available"))
	fail := holder.State + ".fail"
	Expect(os.WriteFile(fail, []byte("apply: NetworkManager is not answering\n"), 0o600)).To(Succeed())

	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "outlive"}})).To(Succeed())
	Eventually(events("NodeIPPool", "outlive")).Should(ContainElement(HavePrefix(
		"ReleaseFailed: Node outlive01 could not take released 10.72.0.1 (eth1) off: ")))
	Eventually(poolCondition("outlive", ippoolv1.ConditionReleasesConfirmed), 5*grace).Should(And(
		HavePrefix("False AddressStillCarried: Quarantined past the quarantine period, handed to nobody until the holder shows them gone: "+
			"10.72.0.1, released by node outlive01 "),
		ContainSubstring("is still on its interface eth1")))
	Eventually(events("NodeIPPool", "outlive")).Should(ContainElement(HavePrefix("AddressStillCarried: ")))

	createPolicy(t, "outlive-next", "outlive-next", "outlive")
	next := addNode(t, t.TempDir(), "outlive-next", "outlive-next")
	s := envtest.SampleNICs(t, holder, next)
	Eventually(enactmentState("outlive-next.outlive-next")).Should(ContainSubstring("is exhausted"))
	Consistently(func() []string { return bits("outlive") }, 3*grace).Should(Equal([]string{"10.72.0.1"}),
		"quarantined however long it lasts")
	Expect(carried(next)()).To(BeEmpty())

	Expect(os.Remove(fail)).To(Succeed())
	Eventually(carried(holder)).Should(BeEmpty())
	Eventually(enactmentState("outlive-next.outlive-next")).Should(HavePrefix("Available"))
	Expect(carried(next)()).To(Equal([]string{"10.72.0.1/24"}))
	Eventually(poolCondition("outlive", ippoolv1.ConditionReleasesConfirmed)).Should(HavePrefix("True"))
	Expect(s.OnTwoNICs()).To(BeEmpty())
	assertIndexed("outlive")
}

// takeInFlight takes ip from pool for an enactment under token, as a
// handler does before it records the address.
func takeInFlight(pool, ip, enactment, token string) {
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	_, err := w.Update(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		if err := alloc.AllocateIP(netip.MustParseAddr(ip)); err != nil {
			return false, err
		}
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: ip, Holder: enactment, Token: token, Since: metav1.Now()})
		return true, nil
	})
	Expect(err).NotTo(HaveOccurred())
}

// recordUnder writes a record of ip into an enactment under the
// resourceVersion token, as a stalled handler that wakes up does.
func recordUnder(name, pool, ip, token string) error {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &e)).To(Succeed())
	e.ResourceVersion = token
	e.Status.IPPool = ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}}
	return k.Status().Update(ctx, &e)
}

// TestFenceChangesTheEnactmentEveryTime: a stalled handler that took the
// same address twice, each time revoked, cannot record it late: the second
// fence changes the enactment as the first did, so the record under the
// second token fails too.
func TestFenceChangesTheEnactmentEveryTime(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "fence", ippoolv1.IPRange{CIDR: "10.73.0.0/24", Start: "10.73.0.1", End: "10.73.0.4"})
	Eventually(available("fence")).Should(HavePrefix("True"))
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "fence01.fence"}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })

	for round := 1; round <= 2; round++ {
		Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
		token := e.ResourceVersion
		takeInFlight("fence", "10.73.0.1", e.Name, token)
		Eventually(func() []ippoolv1.InFlightAddress { return poolStatus("fence").InFlight }, 5*grace).Should(BeEmpty(),
			"round %d: revoked", round)
		Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
		Expect(e.ResourceVersion).NotTo(Equal(token), "round %d: the fence changed the enactment", round)
		Expect(e.Annotations).To(HaveKeyWithValue(ippoolv1.FenceAnnotation, "fence/10.73.0.1@"+token))
		err := recordUnder(e.Name, "fence", "10.73.0.1", token)
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "round %d: the late record under the token fails: %v", round, err)
	}
	Expect(bits("fence")).To(BeEmpty())
}

// TestPoolWrittenBeforeHolderField: a pool whose entries name their holder
// in the deprecated enactment field only, as versions before holder
// wrote them, keeps its stamp and is read as before: a stalled in-flight
// entry is revoked and its enactment fenced, and the next write names
// every entry's holder in both fields.
func TestPoolWrittenBeforeHolderField(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t, nil)
	createPool(t, "legacy", ippoolv1.IPRange{CIDR: "10.73.1.0/24", Start: "10.73.1.1", End: "10.73.1.4"})
	Eventually(available("legacy")).Should(HavePrefix("True"))
	stop() // the legacy entry is written while no controller runs, as before an upgrade
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "legacy01.legacy"}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	token := e.ResourceVersion
	takeInFlight("legacy", "10.73.1.1", e.Name, token)
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "legacy"}, &p); err != nil {
			return err
		}
		Expect(p.Status.InFlight).To(HaveLen(1))
		p.Status.InFlight[0].Holder = ""
		Expect(p.Status.InFlight[0].DeprecatedEnactment).To(Equal(e.Name), "written in both fields")
		Expect(poolstatus.Vouched(&p)).To(BeTrue(), "the stamp does not depend on the field that names the holder")
		return k.Status().Update(ctx, &p)
	})).To(Succeed())

	startController(t, nil)
	Eventually(func() []ippoolv1.InFlightAddress { return poolStatus("legacy").InFlight }, 5*grace).Should(BeEmpty(), "revoked")
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Annotations).To(HaveKeyWithValue(ippoolv1.FenceAnnotation, "legacy/10.73.1.1@"+token), "its holder fenced")
	Expect(bits("legacy")).To(BeEmpty())
	Expect(poolCondition("legacy", ippoolv1.ConditionAvailable)()).To(HavePrefix("True"), "no rebuild needed")
}

// TestUnclaimedButCarriedIsQuarantined: garbage collection reads the
// nodes' networks as a rebuild does: a bit nobody claims but a node
// carries (a retirer that died before it quarantined, a record lost) is
// quarantined for that node, not freed, and freed once the node shows it
// gone.
func TestUnclaimedButCarriedIsQuarantined(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "carry", ippoolv1.IPRange{CIDR: "10.74.0.0/24", Start: "10.74.0.1", End: "10.74.0.9"})
	Eventually(available("carry")).Should(HavePrefix("True"))
	Expect(k.Create(ctx, newNode("carry01", "none"))).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, newNode("carry01", "none")) })
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "carry01"}}
	t.Cleanup(func() { _ = k.Delete(ctx, nns) })
	publish := func(state string, at time.Time) {
		Expect(envtest.PublishState(ctx, k, "carry01", state, at)).To(Succeed())
	}
	publish(`{"interfaces":[{"name":"eth1","ipv4":{"address":[{"ip":"10.74.0.5","prefix-length":24}]}}]}`, time.Now())
	writeBits("carry", "10.74.0.5")
	Eventually(events("NodeIPPool", "carry"), 5*grace).Should(ContainElement(
		"AddressQuarantined: Quarantined 10.74.0.5 on node carry01: allocated for longer than 3s and recorded by no holder, " +
			"but on a node's network; freed once the node shows it gone"))
	Consistently(func() []string { return bits("carry") }, 2*grace).Should(Equal([]string{"10.74.0.5"}))

	publish(`{"interfaces":[{"name":"eth1"}]}`, time.Now().Add(time.Minute))
	Eventually(func() []string { return bits("carry") }).Should(BeEmpty())
}

// TestTerminatingPoolHandsOutNothing: a pool being deleted, held by a
// finalizer not ours, is unavailable and hands out nothing, even to a
// handler that takes addresses itself; a pool deleted while an address is
// in flight revokes it at once and goes once it is revoked, so the late
// record under its token fails, whatever pool of the same name exists by
// then.
func TestTerminatingPoolHandsOutNothing(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "term", Finalizers: []string{"example.com/keep"}},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.75.0.0/24"}}}
	Expect(k.Create(ctx, p)).To(Succeed())
	Eventually(available("term")).Should(HavePrefix("True"))
	Expect(k.Delete(ctx, p)).To(Succeed())
	Eventually(available("term")).Should(HavePrefix("False TerminatingIPPool: The pool is being deleted"))
	createPolicy(t, "term", "term", "term")
	addNodeWith(t, t.TempDir(), "term01", "term", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = true }
	})
	Eventually(enactmentState("term01.term")).Should(ContainSubstring(`NodeIPPool "term" is being deleted and hands out nothing`))
	Consistently(func() []string { return bits("term") }, 2*time.Second).Should(BeEmpty())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == "example.com/keep" })
		return k.Update(ctx, p)
	})).To(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(p), p)) }).Should(BeTrue())

	// An address in flight when its pool is deleted.
	createPool(t, "inflight", ippoolv1.IPRange{CIDR: "10.76.0.0/24", Start: "10.76.0.1", End: "10.76.0.1"})
	Eventually(available("inflight")).Should(HavePrefix("True"))
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "stalled01.inflight"}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	token := e.ResourceVersion
	takeInFlight("inflight", "10.76.0.1", e.Name, token)
	old := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "inflight"}}
	Expect(k.Delete(ctx, old)).To(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(old), old)) }).Should(BeTrue())
	createPool(t, "inflight", ippoolv1.IPRange{CIDR: "10.76.0.0/24", Start: "10.76.0.1", End: "10.76.0.1"})
	Eventually(available("inflight")).Should(HavePrefix("True"))
	claim(t, "other01.inflight", "inflight", "10.76.0.1")
	err := recordUnder(e.Name, "inflight", "10.76.0.1", token)
	Expect(apierrors.IsConflict(err)).To(BeTrue(), "the late record of the old incarnation's address fails: %v", err)
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Annotations).To(HaveKeyWithValue(ippoolv1.FenceAnnotation, "inflight/10.76.0.1@"+token))
}

// TestPolicyRecreatedWhilePoolTerminates: a policy deleted and created
// again while its pool is being deleted. The deletion quarantined the
// node's address, kept for its return; the new enactment waits for a pool
// that hands out nothing, so no replacement comes: the node takes the
// address off, the quarantine lifts on its evidence, and the pool goes.
// Before, the node kept the address on for the replacement it waited for,
// and the pool waited for the address to come off: neither ever moved.
func TestPolicyRecreatedWhilePoolTerminates(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "recterm", Finalizers: []string{"example.com/keep"}},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.77.0.0/24"}}}
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteObject(p) })
	Eventually(available("recterm")).Should(HavePrefix("True"))
	createPolicy(t, "recterm", "recterm", "recterm")
	nd := newNodes(t, "recterm", 1)[0]
	Eventually(enactmentState("recterm01.recterm")).Should(HavePrefix("Available"))
	addr := held("recterm01.recterm", "recterm")
	Expect(addr).To(HaveLen(1))

	Expect(k.Delete(ctx, p)).To(Succeed())
	Eventually(available("recterm")).Should(HavePrefix("False TerminatingIPPool"))
	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "recterm"}})).To(Succeed())
	Eventually(enactmentGone("recterm01.recterm")).Should(BeTrue())
	createPolicy(t, "recterm", "recterm", "recterm")
	Eventually(enactmentState("recterm01.recterm")).Should(ContainSubstring(`NodeIPPool "recterm" is being deleted and hands out nothing`))

	Eventually(carried(nd)).Should(BeEmpty(), "no replacement comes from a pool being deleted: the address comes off")
	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus("recterm").Quarantined }).Should(BeEmpty(),
		"lifted on the node's evidence")
	Eventually(func() []ippoolv1.InFlightAddress { return poolStatus("recterm").InFlight }).Should(BeEmpty())
	Eventually(func() []string { _ = k.Get(ctx, client.ObjectKeyFromObject(p), p); return p.Finalizers }).
		Should(Equal([]string{"example.com/keep"}), "the pool lets go once nothing is in flight or quarantined")
}

// TestDeletedPolicyWithoutHandler: the enactment of a deleted policy whose
// handler is down is deleted and retired by the pool controller.
// Its address stays quarantined however long the handler stays down: past
// the quarantine period the pool says so (ReleasesConfirmed), and nobody
// is handed it. Once the handler is back, it takes the address off its
// interface and publishes its state, and the address is freed.
func TestDeletedPolicyWithoutHandler(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "orphan", ippoolv1.IPRange{CIDR: "10.7.0.0/24", Start: "10.7.0.1", End: "10.7.0.1"})
	Eventually(available("orphan")).Should(HavePrefix("True"))
	createPolicy(t, "orphan", "orphan", "orphan")
	nd := newNodes(t, "orphan", 1)[0]
	Eventually(enactmentState("orphan01.orphan")).Should(HavePrefix("Available"))
	Expect(nd.Configured("eth1")).To(Equal("10.7.0.1/24"))
	Expect(nd.Stop()).To(Succeed())
	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}})).To(Succeed())

	Eventually(enactmentGone("orphan01.orphan")).Should(BeTrue(), "deleted and retired by the pool controller")
	Expect(poolStatus("orphan").Quarantined).To(ConsistOf(And(HaveField("IP", "10.7.0.1"), HaveField("Node", "orphan01"))))
	Eventually(poolCondition("orphan", ippoolv1.ConditionReleasesConfirmed), 5*grace).Should(HavePrefix(
		"False ReleaseUnconfirmed: Quarantined past the quarantine period, handed to nobody until the holder shows them gone: " +
			"10.7.0.1, released by node orphan01 "))
	Expect(poolCondition("orphan", ippoolv1.ConditionReleasesConfirmed)()).To(HaveSuffix(
		"node orphan01 has published no network state since; check its handler pod, or delete the Node if the machine is gone"))
	Eventually(events("NodeIPPool", "orphan")).Should(ContainElement(HavePrefix("ReleaseUnconfirmed: Quarantined past the quarantine period")))
	Expect(bits("orphan")).To(Equal([]string{"10.7.0.1"}), "a timer never frees an address")
	Expect(nd.Configured("eth1")).To(Equal("10.7.0.1/24"))

	// Another node asks the pool for its only address.
	createPolicy(t, "orphan-next", "orphan-next", "orphan")
	next := newNodes(t, "orphan-next", 1)[0]
	Eventually(enactmentState("orphan-next01.orphan-next")).Should(HavePrefix("Failing: "), "the only address is quarantined")
	Consistently(next.Configured).WithArguments("eth1").Should(BeEmpty())

	Expect(nd.Start(env)).To(Succeed())
	Eventually(events("NodeIPPool", "orphan")).Should(ContainElement("AddressReleased: Node orphan01 took released 10.7.0.1 (eth1) off"))
	Eventually(events("NodeIPPool", "orphan")).Should(ContainElement(
		"QuarantineLifted: Freed quarantined 10.7.0.1 (node orphan01 showed it gone)"))
	Eventually(poolCondition("orphan", ippoolv1.ConditionReleasesConfirmed)).Should(HavePrefix("True ReleasesConfirmed"))
	Eventually(enactmentState("orphan-next01.orphan-next")).Should(HavePrefix("Available"), "the freed address serves the other node")
	Expect(next.Configured("eth1")).To(Equal("10.7.0.1/24"))
	Expect(nd.ConfiguredAll("eth1")).To(BeEmpty(), "one address, one NIC")
	assertIndexed("orphan")
}

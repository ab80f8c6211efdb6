package pool_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// nicSampler reads the networks of nodes again and again, and keeps every
// sample in which one address was on two of them: one address, one NIC.
type nicSampler struct {
	mu         sync.Mutex
	nodes      []*envtest.Node
	duplicates []string
	samples    int
}

// sampleNICs samples the networks of nodes, and of those watch adds, until
// the test ends.
func sampleNICs(t *testing.T, nodes ...*envtest.Node) *nicSampler {
	s := &nicSampler{nodes: nodes}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			s.sample()
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
	return s
}

func (s *nicSampler) watch(nodes ...*envtest.Node) {
	s.mu.Lock()
	s.nodes = append(s.nodes, nodes...)
	s.mu.Unlock()
}

func (s *nicSampler) sample() {
	s.mu.Lock()
	nodes := slices.Clone(s.nodes)
	s.mu.Unlock()
	holders := map[netip.Addr][]string{}
	for _, nd := range nodes {
		raw, err := nd.Network.Runner.Show(context.Background())
		if err != nil {
			continue
		}
		for ip := range nmstatectl.Carriers(raw) {
			holders[ip] = append(holders[ip], nd.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for ip, on := range holders {
		if len(on) > 1 {
			sort.Strings(on)
			s.duplicates = append(s.duplicates, fmt.Sprintf("%s on %v", ip, on))
		}
	}
}

// onTwoNICs returns the duplicates seen so far, after at least one more
// sample.
func (s *nicSampler) onTwoNICs() []string {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.duplicates)
}

// carried returns the addresses a node's network carries on eth1.
func carried(nd *envtest.Node) func() []string {
	return func() []string { return nd.ConfiguredAll("eth1") }
}

// TestPolicyDeletedAddressesLeaveTheNIC is the first scenario of the
// Evidence issue: a pooled policy is deleted. Its nodes take their
// addresses off the NIC (kubernetes-nmstate would leave them), and the
// pool frees them only once the nodes' published states show them gone.
// Nodes that get a policy from the same pool next get them, and no address
// is ever on two NICs.
func TestPolicyDeletedAddressesLeaveTheNIC(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "gone", ippoolv1.IPRange{CIDR: "10.70.0.0/24", Start: "10.70.0.1", End: "10.70.0.2"})
	Eventually(available("gone")).Should(HavePrefix("True"))
	createPolicy(t, "gone", "gone", "gone")
	first := newNodes(t, "gone", 2)
	s := sampleNICs(t, first...)
	for _, nd := range first {
		Eventually(enactmentState(nd.Name + ".gone")).Should(HavePrefix("Available"))
		Expect(carried(nd)()).To(HaveLen(1))
	}

	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gone"}})).To(Succeed())
	for _, nd := range first {
		Eventually(carried(nd)).Should(BeEmpty(), "a released address leaves the NIC")
		Eventually(events("NodeIPPool", "gone")).Should(ContainElement(HavePrefix("AddressReleased: Node " + nd.Name + " took released 10.70.0.")))
	}
	Eventually(func() []string { return bits("gone") }).Should(BeEmpty())
	Eventually(events("NodeIPPool", "gone")).Should(ContainElement(And(HavePrefix("QuarantineLifted: Freed quarantined 10.70.0."),
		ContainSubstring("showed it gone)"))))

	createPolicy(t, "gone-next", "gone-next", "gone")
	next := newNodes(t, "gone-next", 2)
	s.watch(next...)
	for _, nd := range next {
		Eventually(enactmentState(nd.Name + ".gone-next")).Should(HavePrefix("Available"))
		Expect(carried(nd)()).To(ConsistOf(HavePrefix("10.70.0.")))
	}
	Expect(s.onTwoNICs()).To(BeEmpty())
	assertIndexed("gone")
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
	s := sampleNICs(t, nodes[0], other)
	Eventually(enactmentState("desel01.desel")).Should(HavePrefix("Available"))
	Expect(carried(nodes[0])()).To(Equal([]string{"10.71.0.1/24"}))

	relabel("desel01", "elsewhere")
	relabel("desel-other", "desel")
	Eventually(enactmentState("desel-other.desel")).Should(HavePrefix("Available"))
	Expect(carried(other)()).To(Equal([]string{"10.71.0.1/24"}))
	Expect(carried(nodes[0])()).To(BeEmpty())
	Expect(s.onTwoNICs()).To(BeEmpty())
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
	s := sampleNICs(t, holder, next)
	Eventually(enactmentState("outlive-next.outlive-next")).Should(ContainSubstring("is exhausted"))
	Consistently(func() []string { return bits("outlive") }, 3*grace).Should(Equal([]string{"10.72.0.1"}),
		"quarantined however long it lasts")
	Expect(carried(next)()).To(BeEmpty())

	Expect(os.Remove(fail)).To(Succeed())
	Eventually(carried(holder)).Should(BeEmpty())
	Eventually(enactmentState("outlive-next.outlive-next")).Should(HavePrefix("Available"))
	Expect(carried(next)()).To(Equal([]string{"10.72.0.1/24"}))
	Eventually(poolCondition("outlive", ippoolv1.ConditionReleasesConfirmed)).Should(HavePrefix("True"))
	Expect(s.onTwoNICs()).To(BeEmpty())
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
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: ip, Enactment: enactment, Token: token, Since: metav1.Now()})
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
	Expect(k.Create(ctx, nns)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, nns) })
	publish := func(state string, at time.Time) {
		Eventually(func() error {
			if err := k.Get(ctx, client.ObjectKeyFromObject(nns), nns); err != nil {
				return err
			}
			nns.Status.CurrentState.Raw = []byte(state)
			nns.Status.LastSuccessfulUpdateTime = metav1.NewTime(at.Truncate(time.Second))
			return k.Status().Update(ctx, nns)
		}).Should(Succeed())
	}
	publish(`{"interfaces":[{"name":"eth1","ipv4":{"address":[{"ip":"10.74.0.5","prefix-length":24}]}}]}`, time.Now())
	writeBits("carry", "10.74.0.5")
	Eventually(events("NodeIPPool", "carry"), 5*grace).Should(ContainElement(
		"AddressQuarantined: Quarantined 10.74.0.5 on node carry01: allocated for longer than 3s and recorded by no enactment, " +
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
		nd.Tune = func(r *handler.Reconciler) { r.DeferToController = false }
	})
	Eventually(enactmentState("term01.term")).Should(ContainSubstring(`NodeIPPool "term" is being deleted and hands out nothing`))
	Consistently(func() []string { return bits("term") }, 2*time.Second).Should(BeEmpty())
	Expect(k.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == "example.com/keep" })
	Expect(k.Update(ctx, p)).To(Succeed())
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

// recordWatch wraps the pool controller's client: on the first record it
// writes, it changes the enactment first (as its handler may at that very
// moment), and it notes, for every record, whether it was written under
// the token of an in-flight entry of the pool.
type recordWatch struct {
	mu      sync.Mutex
	bumped  bool
	records []string
}

func (w *recordWatch) intercept(pool string) interceptor.Funcs {
	return interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object,
		opts ...client.SubResourceUpdateOption) error {
		e, ok := obj.(*nncev1beta1.NodeNetworkConfigurationEnactment)
		if !ok || sub != "status" {
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.bumped {
			w.bumped = true
			bump := e.DeepCopy()
			bump.Annotations = map[string]string{"example.com/touched": "yes"}
			Expect(c.Patch(ctx, bump, client.MergeFrom(e.DeepCopy()))).To(Succeed())
		}
		var p ippoolv1.NodeIPPool
		Expect(c.Get(ctx, types.NamespacedName{Name: pool}, &p)).To(Succeed())
		underToken := slices.ContainsFunc(p.Status.InFlight, func(f ippoolv1.InFlightAddress) bool {
			return f.Enactment == e.Name && f.Token == e.ResourceVersion
		})
		err := c.SubResource(sub).Update(ctx, obj, opts...)
		if err == nil {
			w.records = append(w.records, fmt.Sprintf("%s under its token: %v", e.Name, underToken))
		}
		return err
	}}
}

// TestControllerRecordsUnderTheToken: the pool controller records the
// addresses it served only under the token of their in-flight entries, as
// a handler does: when the enactment changed since it was read, the record
// fails, the addresses are withdrawn, and the enactment is served again
// under a new token. A record under a newer resourceVersion would escape
// the fence a revocation writes.
func TestControllerRecordsUnderTheToken(t *testing.T) {
	RegisterTestingT(t)
	watch := &recordWatch{}
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Pools.Client = interceptor.NewClient(withWatch{pc.Pools.Client}, watch.intercept("token"))
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	createPool(t, "token", ippoolv1.IPRange{CIDR: "10.77.0.0/24", Start: "10.77.0.1", End: "10.77.0.8"})
	Eventually(available("token")).Should(HavePrefix("True"))
	createPolicy(t, "token", "token", "token")
	// The handler waits for the controller, however long it takes.
	addNodeWith(t, t.TempDir(), "token01", "token", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.FailedRequeue = time.Hour }
	})
	Eventually(enactmentState("token01.token")).Should(HavePrefix("Available"))
	watch.mu.Lock()
	defer watch.mu.Unlock()
	Expect(watch.bumped).To(BeTrue())
	Expect(watch.records).To(ConsistOf("token01.token under its token: true"))
	assertIndexed("token")
}

// withWatch lets the interceptor wrap a manager's client, which does not
// watch; the controller never asks it to.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}

// skewed is a clock that runs behind the real one.
type skewed struct {
	clock.RealClock
	by time.Duration
}

func (s skewed) Now() time.Time                  { return time.Now().Add(-s.by) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// TestSkewedNodeClock: a node whose clock runs an hour behind releases an
// address it cannot take off. Its quarantine is timed on the pool
// controller's clock, not the node's: it is not reported overdue at once,
// and it is never lifted while the node carries the address.
func TestSkewedNodeClock(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, 20*time.Second)
	createPool(t, "skew", ippoolv1.IPRange{CIDR: "10.78.0.0/24", Start: "10.78.0.1", End: "10.78.0.1"})
	Eventually(available("skew")).Should(HavePrefix("True"))
	createPolicy(t, "skew", "skew", "skew")
	holder := addNodeWith(t, t.TempDir(), "skew01", "skew", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) {
			r.Clock = skewed{by: time.Hour}
			r.Pools.Clock = r.Clock
		}
	})
	Eventually(enactmentState("skew01.skew")).Should(HavePrefix("Available"))
	Expect(os.WriteFile(holder.State+".fail", []byte("apply: NetworkManager is not answering\n"), 0o600)).To(Succeed())
	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "skew"}})).To(Succeed())

	var q *ippoolv1.QuarantinedAddress
	Eventually(func() *metav1.Time {
		s := poolStatus("skew")
		if q = poolstatus.QuarantineOf(&ippoolv1.NodeIPPool{Status: s}, "10.78.0.1"); q == nil {
			return nil
		}
		return q.StateSeenAtRelease
	}).ShouldNot(BeNil())
	Expect(time.Since(q.Since.Time)).To(BeNumerically("<", time.Minute), "since is the controller's time, not the node's")
	Consistently(poolCondition("skew", ippoolv1.ConditionReleasesConfirmed), 10*time.Second).Should(HavePrefix("True"))
	Expect(bits("skew")).To(Equal([]string{"10.78.0.1"}))
	Expect(carried(holder)()).To(Equal([]string{"10.78.0.1/24"}))
}

// TestUnvouchedPoolDeleted: a pool whose bitmap was emptied by hand and
// that is deleted before the pool controller rebuilt it still goes: being
// deleted, it hands nothing out, and its entries are resolved all the same.
func TestUnvouchedPoolDeleted(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t, nil)
	createPool(t, "unvouched", ippoolv1.IPRange{CIDR: "10.79.0.0/24"})
	Eventually(available("unvouched")).Should(HavePrefix("True"))
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "stalled01.unvouched"}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	takeInFlight("unvouched", "10.79.0.1", e.Name, e.ResourceVersion)
	stop()
	setBits("unvouched")
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "unvouched"}}
	Expect(k.Delete(ctx, p)).To(Succeed())
	startController(t, nil)
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(p), p)) }).Should(BeTrue())
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Annotations).To(HaveKey(ippoolv1.FenceAnnotation), "its allocation in flight was revoked first")
}

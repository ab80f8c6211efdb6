package pool_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestBusyPoolServedByController: handlers leave new addresses to the
// controller (a request on creation) and never allocate themselves (their
// own attempt is an hour away): they all end Available with unique,
// indexed addresses the controller allocated in shared pool writes. The
// controller writes only the record; the request that asked for it asks
// the policy controller for a slot, and each handler renders its state
// once granted.
func TestBusyPoolServedByController(t *testing.T) {
	RegisterTestingT(t)
	metrics := pool.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	startController(t, metrics)
	createPool(t, "busy", ippoolv1.IPRange{CIDR: "10.61.0.0/24"})
	Eventually(available("busy")).Should(HavePrefix("True"))
	createPolicy(t, "busy", "busy", "busy")
	const n = 12
	dir := t.TempDir()
	nodes := make([]*envtest.Node, n)
	for i := range nodes {
		nodes[i] = addNodeWith(t, dir, fmt.Sprintf("busy%02d", i+1), "busy", func(nd *envtest.Node) {
			nd.Tune = func(r *handler.Reconciler) { r.PendingRequeue, r.FailedRequeue = time.Hour, time.Hour }
		})
	}
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name+".busy"), time.Minute).Should(HavePrefix("Available"))
		ips := held(nd.Name+".busy", "busy")
		Expect(ips).To(HaveLen(1))
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		Expect(k.Get(ctx, types.NamespacedName{Name: nd.Name + ".busy"}, &e)).To(Succeed())
		Expect(string(e.Status.DesiredState.Raw)).To(ContainSubstring(ips[0]), "rendered with its address when applied")
		Expect(nd.ConfiguredAll("eth1")).To(ContainElement(HavePrefix(ips[0] + "/")))
	}
	assertIndexed("busy")
	t.Logf("controller pool writes for waiting nodes: %v", gathered(registry, "nmstate_ippool_controller_allocation_attempts_total"))

	// An enactment that asks, with no handler behind it: the controller
	// records an address for it, in flight until recorded, and indexes it.
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "hand.busy",
		Labels: map[string]string{shared.EnactmentPolicyLabel: "busy"}}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	e.Status.PolicyGeneration = 1
	e.Status.WaitingForIPPool = "busy"
	e.Status.Conditions = conditions.OneTrue(nil, shared.NodeNetworkConfigurationEnactmentConditionTypes[:],
		shared.NodeNetworkConfigurationEnactmentConditionPending, ippoolv1.ReasonIPPoolBusy, "busy", time.Now())
	Expect(k.Status().Update(ctx, e)).To(Succeed())
	Eventually(func() []string { return held("hand.busy", "busy") }).Should(HaveLen(1))
	Expect(gathered(registry, "nmstate_ippool_controller_allocation_attempts_total")).To(BeNumerically(">", 0))
	assertIndexed("busy")
	Eventually(func() []string { return envtestEntries("busy") }).Should(BeEmpty(), "the in-flight entry is pruned once recorded")

	// A new enactment that asks on creation, before anything is written
	// to its status, is served the same way; one that names another pool
	// is not.
	asked := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "asked.busy",
		Labels:      map[string]string{shared.EnactmentPolicyLabel: "busy"},
		Annotations: map[string]string{ippoolv1.RequestAnnotation: "busy"}}}
	elsewhere := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere.busy",
		Labels:      map[string]string{shared.EnactmentPolicyLabel: "busy"},
		Annotations: map[string]string{ippoolv1.RequestAnnotation: "another-pool"}}}
	for _, e := range []*nncev1beta1.NodeNetworkConfigurationEnactment{asked, elsewhere} {
		Expect(k.Create(ctx, e)).To(Succeed())
		t.Cleanup(func() { _ = k.Delete(ctx, e) })
	}
	Eventually(func() []string { return held("asked.busy", "busy") }).Should(HaveLen(1))
	Expect(held("elsewhere.busy", "busy")).To(BeEmpty())
	// The controller writes the record and nothing of the handler's
	// (docs/protocol.md "Who writes what"): a new enactment's request
	// asks the policy controller for a slot once served, an older one's
	// handler asks in a write of its own.
	for name, generation := range map[string]int64{"hand.busy": 1, "asked.busy": 0} {
		Expect(k.Get(ctx, types.NamespacedName{Name: name}, e)).To(Succeed())
		Expect(e.Status.IPPool["busy"].Allocated).To(HaveLen(1), name)
		Expect(e.Status.PolicyGeneration).To(Equal(generation), name)
		Expect(e.Status.Slot == nil || e.Status.Slot.Requested.IsZero()).To(BeTrue(), "%s: no slot requested for the handler", name)
		Expect(e.Status.DesiredState.Raw).To(BeEmpty(), name)
	}
	assertIndexed("busy")
}

func envtestEntries(pool string) []string {
	ips, err := envtest.EntryAddresses(ctx, k, pool)
	if err != nil {
		return []string{err.Error()}
	}
	return ips
}

func gathered(registry *prometheus.Registry, name string) float64 {
	families, err := registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var sum float64
	for _, f := range families {
		if strings.EqualFold(f.GetName(), name) {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestHandlerOnlyAsks: with no pool controller running, a handler never
// writes the pool (its RBAC has no pool writes); its enactment waits,
// Pending / IPPoolBusy, with a message that does not change from one look
// to the next (a status write would change the token the controller
// serves it under), and a Warning Event says, once --unserved-warning has
// passed, to check that the pool controller runs. A controller that
// starts serves it.
func TestHandlerOnlyAsks(t *testing.T) {
	RegisterTestingT(t)
	createIdlePool(t, "asks", "10.67.0.0/24")
	before := poolStatus("asks")
	createPolicy(t, "asks", "asks", "asks")
	addNodeWith(t, t.TempDir(), "asks01", "asks", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.UnservedWarning = time.Second }
	})
	Eventually(enactmentState("asks01.asks")).Should(Equal(
		`Pending: NodeIPPool "asks": the pool controller allocates for node asks01, with the other nodes that wait, in one pool write`))
	Eventually(events("NodeNetworkConfigurationEnactment", "asks01.asks")).Should(ContainElement(And(
		HavePrefix("NotServed: NodeIPPool asks: node asks01 has waited for the pool controller since "),
		HaveSuffix("check that it runs (Deployment nmstate-ippool-pool-controller)"))))
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	Expect(k.Get(ctx, types.NamespacedName{Name: "asks01.asks"}, &e)).To(Succeed())
	Consistently(func() string {
		var now nncev1beta1.NodeNetworkConfigurationEnactment
		Expect(k.Get(ctx, types.NamespacedName{Name: "asks01.asks"}, &now)).To(Succeed())
		return now.ResourceVersion
	}, 3*time.Second).Should(Equal(e.ResourceVersion), "a waiting enactment is not written again")
	after := poolStatus("asks")
	Expect(after.AllocatedOffsets).To(Equal(before.AllocatedOffsets), "the handler wrote the pool")
	Expect(after.InFlight).To(BeEmpty())

	startController(t, nil)
	Eventually(enactmentState("asks01.asks")).Should(HavePrefix("Available"))
	Expect(held("asks01.asks", "asks")).To(Equal([]string{"10.67.0.1"}))
}

// TestServedRolloutAborted: when a policy's rollout is aborted (as many
// nodes as maxUnavailable gave up on it), the served requests that wait
// for their slot are aborted too, and their handlers hear of it: each
// writes its own fields and ends Aborted at the policy's generation, which
// the policy counts as aborted, not as progressing. Nothing else applies;
// the fixed policy rolls out everywhere with the recorded addresses. The
// policy controller answers in status.slot alone: over the abort too,
// docs/protocol.md's table of who writes what holds.
func TestServedRolloutAborted(t *testing.T) {
	RegisterTestingT(t)
	ws, err := envtest.WatchWriters(ctx, env.Config, k.Scheme(), &nncev1beta1.NodeNetworkConfigurationEnactmentList{},
		func(o metav1.Object) bool { return strings.HasSuffix(o.GetName(), ".aborted") }, "slot", "ippool[*]")
	Expect(err).NotTo(HaveOccurred())
	startController(t, nil)
	createPool(t, "aborted", ippoolv1.IPRange{CIDR: "10.61.3.0/24"})
	Eventually(available("aborted")).Should(HavePrefix("True"))
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "aborted"}}
	p.Spec.NodeSelector = map[string]string{"role": "aborted"}
	p.Spec.Capture = map[string]string{"addr": "ippool.aborted.allocate"}
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	one := intstr.FromInt32(1)
	p.Spec.MaxUnavailable = &one
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteObject(p) })
	dir := t.TempDir()
	var nodes []*envtest.Node
	addFailing := func(i int) {
		nodes = append(nodes, addNodeWith(t, dir, fmt.Sprintf("aborted%02d", i), "aborted", func(nd *envtest.Node) {
			Expect(os.WriteFile(nd.State+".fail", []byte("apply: eth1: no such device (simulated)\n"), 0o600)).To(Succeed())
			// Served, never allocating itself; a failure is final.
			nd.Tune = func(r *handler.Reconciler) {
				r.PendingRequeue, r.FailedRequeue, r.Retry.Steps = time.Hour, time.Hour, 0
			}
		}))
	}
	for i := range 3 {
		addFailing(i + 1)
	}
	type state struct {
		Condition  string
		Generation int64
	}
	states := func() []state {
		var out []state
		for _, nd := range nodes {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			if err := k.Get(ctx, types.NamespacedName{Name: nd.Name + ".aborted"}, &e); err != nil {
				return []state{{Condition: err.Error()}}
			}
			out = append(out, state{string(conditions.TrueType(e.Status.Conditions)), e.Status.PolicyGeneration})
		}
		return out
	}
	Expect(k.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	g := p.Generation
	Eventually(states, time.Minute).Should(ConsistOf(state{"Failing", g}, state{"Aborted", g}, state{"Aborted", g}))
	Eventually(policyCondition("aborted", shared.NodeNetworkConfigurationPolicyConditionDegraded)).Should(
		Equal("True: 1/3 nodes failed to configure, 2 aborted"))
	Consistently(func() int32 {
		var applies int32
		for _, nd := range nodes {
			applies += nd.Network.Applies.Load()
		}
		return applies
	}, 2*time.Second).Should(Equal(int32(1)), "only the node granted a slot applied")
	assertIndexed("aborted")

	// A node that joins the aborted rollout: its served request is
	// aborted as it stands, before its handler wrote anything, and its
	// handler ends it Aborted at the generation.
	addFailing(4)
	Eventually(states, time.Minute).Should(ConsistOf(state{"Failing", g}, state{"Aborted", g}, state{"Aborted", g}, state{"Aborted", g}))
	Eventually(policyCondition("aborted", shared.NodeNetworkConfigurationPolicyConditionDegraded)).Should(
		Equal("True: 1/4 nodes failed to configure, 3 aborted"))
	Expect(nodes[3].Network.Applies.Load()).To(BeZero(), "the joining node applied nothing")

	recorded := map[string][]string{}
	for _, nd := range nodes {
		recorded[nd.Name] = held(nd.Name+".aborted", "aborted")
		Expect(recorded[nd.Name]).To(HaveLen(1), nd.Name)
		Expect(os.Remove(nd.State + ".fail")).To(Succeed())
	}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		three := intstr.FromInt32(3) // fixed: a new generation, rolled out three at a time
		p.Spec.MaxUnavailable = &three
		return k.Update(ctx, p)
	})).To(Succeed())
	Eventually(states, time.Minute).Should(HaveEach(state{"Available", p.Generation}))
	for _, nd := range nodes {
		Expect(held(nd.Name+".aborted", "aborted")).To(Equal(recorded[nd.Name]), "%s keeps its address", nd.Name)
		Expect(nd.ConfiguredAll("eth1")).To(ContainElement(HavePrefix(recorded[nd.Name][0] + "/")))
	}
	seen, problems := ws.Check("NodeNetworkConfigurationEnactment", "part of an enactment", writers, writerOf)
	for _, msg := range problems {
		t.Error(msg)
	}
	Expect(seen).To(HaveKey("status.slot.aborted"), "the watch saw the abort")
}

// policyCondition returns the policy's condition t as "Status: Message".
func policyCondition(name string, t shared.ConditionType) func() string {
	return func() string {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := p.Status.Conditions.Find(t)
		if c == nil {
			return "no " + string(t)
		}
		return string(c.Status) + ": " + c.Message
	}
}

// TestServedRequestShowsItsPlaceInTheQueue: a new node's served request
// that waits for a maxUnavailable slot says so (Pending /
// MaxUnavailableLimitReached, as any enactment waiting for one) with its
// address recorded: the policy controller queues it (status.slot.queued),
// and its handler shows it, asking for the slot from the place its
// creation gave it. It applies once the slot is free. The policy's one
// slot is held by the other node, granted by hand while its handler is
// stopped.
func TestServedRequestShowsItsPlaceInTheQueue(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "queued", ippoolv1.IPRange{CIDR: "10.61.4.0/24"})
	Eventually(available("queued")).Should(HavePrefix("True"))
	p := createPolicyWith(t, "queued", "queued", map[string]string{"addr": "ippool.queued.allocate"}, envtest.OneAddressState)
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		one := intstr.FromInt32(1)
		p.Spec.MaxUnavailable = &one
		return k.Update(ctx, p)
	})).To(Succeed())
	dir := t.TempDir()
	first := addNode(t, dir, "queued01", "queued")
	Eventually(enactmentState("queued01.queued")).Should(HavePrefix("Available"))
	Expect(first.Stop()).To(Succeed())
	holdSlot := func(granted bool) { holdSlotOf("queued01.queued", granted) }
	holdSlot(true)

	second := addNodeWith(t, dir, "queued02", "queued", func(nd *envtest.Node) {
		// Served, never allocating itself on a slow machine.
		nd.Tune = func(r *handler.Reconciler) { r.PendingRequeue, r.FailedRequeue = time.Hour, time.Hour }
	})
	Eventually(enactmentState("queued02.queued")).Should(Equal("Pending: maxUnavailable nodes are already being configured; waiting"))
	Expect(held("queued02.queued", "queued")).To(HaveLen(1), "served while it waits")
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	Expect(k.Get(ctx, types.NamespacedName{Name: "queued02.queued"}, &e)).To(Succeed())
	Expect(e.Status.Slot).NotTo(BeNil())
	Expect(e.Status.Slot.Queued).NotTo(BeNil(), "queued by the policy controller")
	Expect(e.Status.Slot.Requested.Time).To(BeTemporally("==", e.CreationTimestamp.Time), "asks from its creation's place")
	Expect(k.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	Expect(e.Status.PolicyGeneration).To(Equal(p.Generation), "shown by its handler")
	Consistently(func() int32 { return second.Network.Applies.Load() }, time.Second).Should(BeZero(), "no apply without a slot")

	holdSlot(false)
	Eventually(enactmentState("queued02.queued")).Should(HavePrefix("Available"))
	ip := held("queued02.queued", "queued")
	Expect(ip).To(HaveLen(1))
	Expect(second.ConfiguredAll("eth1")).To(ContainElement(HavePrefix(ip[0] + "/")))
	assertIndexed("queued")
}

package pool_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestBusyPoolServedByController: handlers leave new addresses to the
// controller (a request on creation) and never allocate themselves (their
// own attempt is an hour away): they all end Available with unique,
// indexed addresses the controller allocated in shared pool writes. The
// controller's record asks to apply (a slot request, Progressing, the
// policy generation) and the handlers render their state once granted.
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

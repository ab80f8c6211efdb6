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

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestBusyPoolServedByController: handlers leave new addresses to the
// controller (Pending / IPPoolBusy) and never allocate themselves (their
// own attempt is an hour away): they all end Available with unique,
// indexed addresses the controller allocated in shared pool writes.
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
			nd.Tune = func(r *handler.Reconciler) { r.PendingRequeue = time.Hour }
		})
	}
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name+".busy"), time.Minute).Should(HavePrefix("Available"))
		Expect(held(nd.Name+".busy", "busy")).To(HaveLen(1))
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

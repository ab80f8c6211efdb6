package pool_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestRecreatedPool is the specification's "exhausted → re-create" path
// with real handlers, served by the pool controller or taking their own
// addresses (--self-allocate): re-created larger, every address is kept;
// re-created smaller, the enactment whose address no longer fits is told
// so and allocates again, and the other keeps its address.
func TestRecreatedPool(t *testing.T) {
	for _, mode := range []struct {
		name, net    string
		selfAllocate bool
	}{{"keep", "10.1.0", false}, {"keepself", "10.2.0", true}} {
		t.Run(mode.name, func(t *testing.T) { recreatedPool(t, mode.name, mode.net, mode.selfAllocate) })
	}
}

func recreatedPool(t *testing.T, name, net string, selfAllocate bool) {
	RegisterTestingT(t)
	startController(t, nil)
	ip := func(last int) string { return fmt.Sprintf("%s.%d", net, last) }
	spec := func(first, last int) ippoolv1.IPRange {
		return ippoolv1.IPRange{CIDR: net + ".0/24", Start: ip(first), End: ip(last)}
	}
	createPool(t, name, spec(1, 2))
	createPolicy(t, name, name, name)
	metrics, registry := handler.NewMetrics(), prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	handlerWrites := func() float64 { // the handlers' pool writes
		families, err := registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		var n float64
		for _, f := range families {
			if f.GetName() == "nmstate_ippool_allocation_attempts_total" {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	newNodes(t, name, 2, func(nd *envtest.Node) {
		nd.Metrics = metrics
		nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = selfAllocate }
	})
	e1, e2 := name+"01."+name, name+"02."+name
	for _, e := range []string{e1, e2} {
		Eventually(enactmentState(e)).Should(HavePrefix("Available"))
	}
	first, second := held(e1, name), held(e2, name)

	deleteObject(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}})
	createPool(t, name, spec(1, 50))
	Eventually(available(name)).Should(HavePrefix("True ReconciledPool"))
	Expect(bits(name)).To(Equal([]string{ip(1), ip(2)}))
	Consistently(func() []string { return append(held(e1, name), held(e2, name)...) }, time.Second).
		Should(Equal(append(first, second...)))

	before := handlerWrites()
	deleteObject(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}})
	createPool(t, name, spec(2, 9))
	node := name + "01"
	if first[0] != ip(1) {
		node = name + "02"
	}
	Eventually(events("NodeIPPool", name)).Should(ContainElement(
		"AddressOutsideRange: This range no longer hands out addresses that holders hold; nodes are given a new address: " +
			ip(1) + " at node " + node + " and interface eth1 (enactment " + node + "." + name + ")"))
	enactment := node + "." + name
	Eventually(events("NodeNetworkConfigurationEnactment", enactment)).Should(ContainElement(HavePrefix(
		fmt.Sprintf("AddressOutsideRange: capture addr: %s is no longer handed out by NodeIPPool %q", ip(1), name))))
	Eventually(func() []string { return held(enactment, name) }).Should(Equal([]string{ip(3)}))
	if selfAllocate {
		Expect(handlerWrites()).To(BeNumerically(">", before), "the handler took the replacement itself")
	} else {
		Expect(handlerWrites()).To(BeZero(), "the pool controller served the replacement")
	}
	Eventually(enactmentState(enactment)).Should(HavePrefix("Available"))
	assertIndexed(name)
}

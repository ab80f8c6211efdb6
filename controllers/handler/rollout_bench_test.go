package handler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// plainState configures eth1 without an address from a pool: the rollout
// kubernetes-nmstate does, the baseline of BenchmarkRollout.
const plainState = `interfaces:
- name: eth1
  type: ethernet
  state: up
`

// BenchmarkRollout is the project's scale benchmark. In every iteration
// it rolls out, to N nodes each running its own handler against the real
// API server, first a policy that only configures eth1 (the baseline,
// what kubernetes-nmstate does) and then one that also gives each node an
// address from a pool, and measures each until every enactment is
// Available. It reports both times and their ratio, the cost of IP pools,
// and the pool write conflicts per allocation.
//
//	go test -run '^$' -bench Rollout -benchtime 3x ./controllers/handler/
func BenchmarkRollout(b *testing.B) {
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchmarkRollout(b, n) })
	}
}

func benchmarkRollout(b *testing.B, n int) {
	g := NewWithT(b)
	RegisterTestingT(b)
	role := fmt.Sprintf("bench%d", n)
	metrics := handler.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	nodes := newNodes(b, role+"-", n, map[string]string{"role": role})
	for _, nd := range nodes {
		nd.Metrics = metrics
		start(b, nd)
	}
	newPool(b, role, ippoolv1.IPRange{CIDR: "10.200.0.0/16"}, true)
	var plain, pooled time.Duration
	b.ResetTimer()
	for i := range b.N {
		plain += rollout(b, g, fmt.Sprintf("%s-plain-%d", role, i), role, nil, plainState, n)
		pooled += rollout(b, g, fmt.Sprintf("%s-pool-%d", role, i), role, map[string]string{"addr": "ippool." + role + ".allocate"},
			envtest.OneAddressState, n)
	}
	b.StopTimer()
	b.ReportMetric(plain.Seconds()/float64(b.N), "plain-s/op")
	b.ReportMetric(pooled.Seconds()/float64(b.N), "ippool-s/op")
	b.ReportMetric(pooled.Seconds()/plain.Seconds(), "ippool/plain")
	b.ReportMetric(counter(registry, "nmstate_ippool_allocation_conflicts_total")/float64(n*b.N), "conflicts/alloc")
}

// rollout creates a policy for the nodes labelled role, waits until all n
// enactments are Available, and returns how long that took; then it
// deletes the policy and waits until its enactments are gone, untimed.
func rollout(b testing.TB, g Gomega, name, role string, captures map[string]string, desired string, n int) time.Duration {
	p := newPolicy(b, name, map[string]string{"role": role}, captures, desired)
	began := time.Now()
	g.Eventually(func() int { return available(g, name) }, 5*time.Minute, 20*time.Millisecond).Should(Equal(n))
	took := time.Since(began)
	g.Expect(k.Delete(context.Background(), p)).To(Succeed())
	g.Eventually(func() int { return enactmentsOf(g, name) }, 5*time.Minute, 50*time.Millisecond).Should(BeZero())
	return took
}

func available(g Gomega, policy string) int {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	g.Expect(k.List(context.Background(), &list, client.MatchingLabels{shared.EnactmentPolicyLabel: policy})).To(Succeed())
	count := 0
	for _, e := range list.Items {
		if c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionAvailable); c != nil && c.Status == corev1.ConditionTrue {
			count++
		}
	}
	return count
}

func enactmentsOf(g Gomega, policy string) int {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	g.Expect(k.List(context.Background(), &list, client.MatchingLabels{shared.EnactmentPolicyLabel: policy})).To(Succeed())
	return len(list.Items)
}

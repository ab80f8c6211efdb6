package pool_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
)

var enactmentCount = flag.Int("holdings.n", 1000, "enactments BenchmarkEnactmentsFromAPI creates")

// benchState is an enactment's desired state as a node of a fleet
// renders it: a bond of two NICs, a VLAN on it with the pool's address,
// and a route.
const benchState = `{"interfaces":[` +
	`{"name":"eth1","type":"ethernet","state":"up"},{"name":"eth2","type":"ethernet","state":"up"},` +
	`{"name":"bond0","type":"bond","state":"up","link-aggregation":{"mode":"802.3ad","port":["eth1","eth2"],` +
	`"options":{"miimon":"100","lacp_rate":"fast"}},"ipv4":{"enabled":false},"ipv6":{"enabled":false}},` +
	`{"name":"bond0.120","type":"vlan","state":"up","vlan":{"base-iface":"bond0","id":120},` +
	`"ipv4":{"enabled":true,"dhcp":false,"address":[{"ip":"10.120.%d.%d","prefix-length":16}]},"ipv6":{"enabled":false}}],` +
	`"routes":{"config":[{"destination":"10.200.0.0/16","next-hop-address":"10.120.0.1","next-hop-interface":"bond0.120"}]}}`

// BenchmarkEnactmentsFromAPI reads every enactment as the API server has
// it, as a pass that must not trust the cache does, at holdings.n
// enactments each with a rendered desired state, two ways in the same
// run: listed whole from the API server (the baseline, what every such
// pass did), and as the pool controller now reads them, their metadata
// listed and each taken from the cache at the API server's version. It
// reports each read's time and allocation, and the ratios.
//
//	go test -run '^$' -bench EnactmentsFromAPI -benchtime 20x ./controllers/pool/
func BenchmarkEnactmentsFromAPI(b *testing.B) {
	RegisterTestingT(b)
	n := *enactmentCount
	for i := range n {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench%04d.fleet", i)}}
		Expect(k.Create(ctx, e)).To(Succeed())
		e.Status.DesiredState = shared.NewState(fmt.Sprintf(benchState, i/250, i%250+1))
		e.Status.PolicyGeneration = 1
		Expect(k.Status().Update(ctx, e)).To(Succeed())
		b.Cleanup(func() { _ = k.Delete(context.Background(), e) })
	}
	cctx, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)
	c, err := cache.New(env.Config, cache.Options{Scheme: k.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	_, err = c.GetInformer(cctx, &nncev1beta1.NodeNetworkConfigurationEnactment{})
	Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(cctx) }()
	Expect(c.WaitForCacheSync(cctx)).To(BeTrue())
	cached, err := client.New(env.Config, client.Options{Scheme: k.Scheme(), Cache: &client.CacheOptions{Reader: c}})
	Expect(err).NotTo(HaveOccurred())
	r := &pool.Reconciler{Client: cached, APIReader: k}
	Eventually(func() int {
		var list nncev1beta1.NodeNetworkConfigurationEnactmentList
		_ = cached.List(ctx, &list)
		return len(list.Items)
	}).Should(BeNumerically(">=", n))

	measure := func(read func(context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error)) (time.Duration, uint64) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		got, err := read(ctx)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(got)).To(BeNumerically(">=", n))
		return took, after.TotalAlloc - before.TotalAlloc
	}
	var listedT, nowT time.Duration
	var listedB, nowB uint64
	b.ResetTimer()
	for b.Loop() {
		t, a := measure(r.EnactmentsListed)
		listedT, listedB = listedT+t, listedB+a
		t, a = measure(r.EnactmentsFromAPI)
		nowT, nowB = nowT+t, nowB+a
	}
	runs := float64(b.N)
	b.ReportMetric(float64(listedT.Milliseconds())/runs, "listed-ms")
	b.ReportMetric(float64(nowT.Milliseconds())/runs, "metadata+cache-ms")
	b.ReportMetric(float64(nowT)/float64(listedT), "time-ratio")
	b.ReportMetric(float64(listedB)/runs/(1<<20), "listed-MiB")
	b.ReportMetric(float64(nowB)/runs/(1<<20), "metadata+cache-MiB")
	b.ReportMetric(float64(nowB)/float64(listedB), "alloc-ratio")
}

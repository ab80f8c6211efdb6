package claim_test

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	claimCount = flag.Int("claims.n", 1000, "claims BenchmarkClaims creates against one pool")
	nodeCount  = flag.Int("claims.nodes", 0, "Nodes BenchmarkClaims creates first, each with a NodeNetworkState whose addresses are outside the pool's range")
)

// BenchmarkClaims creates claims.n IPAddressClaims of one NodeIPPool at
// once and waits until every one has its IPAddress and is Ready. It
// reports the pool writes per claim (every change of the pool's
// resourceVersion, the pool controller's included), the time per claim,
// and that time as a ratio of the floor measured in the same run: as many
// ConfigMaps created one after another, the least a provider that writes
// one object per claim costs on this API server. With claims.nodes, the
// cluster has that many Nodes first, each with a published network state
// (the states a claim's new address avoids are read for every claim).
//
//	make bench-claims CLAIMS=1000 CLAIM_NODES=1000
func BenchmarkClaims(b *testing.B) {
	RegisterTestingT(b)
	n := *claimCount
	fleet(b, *nodeCount)
	for i := 0; i < b.N; i++ {
		ns := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		Expect(k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

		start := time.Now()
		for j := range n {
			Expect(k.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("floor-%d", j)}})).To(Succeed())
		}
		floor := time.Since(start)

		pc, err := env.StartPoolController(grace, nil)
		Expect(err).NotTo(HaveOccurred())
		pool := "bench-" + ns
		p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.96.0.0/16"}}}
		Expect(k.Create(ctx, p)).To(Succeed())
		Eventually(available(pool)).Should(HavePrefix("True"))

		wc, err := envtest.ClientFor(env.Config)
		Expect(err).NotTo(HaveOccurred())
		w, err := wc.Watch(ctx, &ippoolv1.NodeIPPoolList{},
			&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pool)})
		Expect(err).NotTo(HaveOccurred())
		writes := make(chan int)
		go func() {
			count := 0
			for ev := range w.ResultChan() {
				if ev.Type == watch.Modified {
					count++
				}
			}
			writes <- count
		}()

		servedAt := watchServed(wc, ns, n)
		start = time.Now()
		for j := range n {
			Expect(k.Create(ctx, newClaim(ns, fmt.Sprintf("m%d-eth0-0", j), pool))).To(Succeed())
		}
		var at time.Time
		Eventually(servedAt, 10*time.Minute).Should(Receive(&at))
		Expect(at.IsZero()).To(BeFalse(), "the watch of the claims ended before every claim was served")
		served := at.Sub(start)
		// The in-flight entries are pruned in batches after the claims are
		// served: wait for them, their writes count too.
		Eventually(func() int {
			var fresh ippoolv1.NodeIPPool
			_ = k.Get(ctx, client.ObjectKeyFromObject(p), &fresh)
			return len(fresh.Status.InFlight)
		}, 5*time.Minute, time.Second).Should(BeZero())
		w.Stop()
		poolWrites := <-writes
		Expect(bits(pool)()).To(HaveLen(n))
		Expect(pc.Stop()).To(Succeed())

		b.ReportMetric(float64(poolWrites)/float64(n), "pool-writes/claim")
		b.ReportMetric(float64(served.Milliseconds())/float64(n), "ms/claim")
		b.ReportMetric(served.Seconds()/floor.Seconds(), "x-floor")
		fmt.Printf("BenchmarkClaims: %d claims served in %s (%.1f ms each), %d pool writes (%.2f per claim); floor (%d ConfigMaps) %s: %.1fx\n",
			n, served.Round(time.Millisecond), float64(served.Milliseconds())/float64(n), poolWrites, float64(poolWrites)/float64(n),
			n, floor.Round(time.Millisecond), served.Seconds()/floor.Seconds())
	}
}

// watchServed watches the claims of namespace ns and sends the moment
// the n-th of them points at its IPAddress (status.addressRef): the time
// a burst of claims took, to the event, where a poll of the claims would
// add up to its period. It sends the zero time if the watch ends first.
func watchServed(wc client.WithWatch, ns string, n int) <-chan time.Time {
	cw, err := wc.Watch(ctx, capi.NewClaimList(version), client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	servedAt := make(chan time.Time, 1)
	go func() {
		defer cw.Stop()
		ready := map[string]bool{}
		for ev := range cw.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if ref, _, _ := unstructured.NestedString(u.Object, "status", "addressRef", "name"); ref != "" && !ready[u.GetName()] {
				ready[u.GetName()] = true
				if len(ready) == n {
					servedAt <- time.Now()
					return
				}
			}
		}
		servedAt <- time.Time{}
	}()
	return servedAt
}

// fleet creates nodes Nodes, each with a NodeNetworkState of three
// interfaces, a dozen routes and static addresses outside 10.96.0.0/16,
// and deletes them when b ends.
func fleet(b *testing.B, nodes int) {
	for i := range nodes {
		name := fmt.Sprintf("bench-node-%d", i)
		Expect(k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		var routes []string
		for r := range 12 {
			routes = append(routes, fmt.Sprintf(`{"destination":"172.%d.0.0/16","next-hop-address":"192.168.%d.1","next-hop-interface":"eth0","metric":100,"table-id":254}`, 16+r, i/250))
		}
		state := fmt.Sprintf(`{"interfaces":[`+
			`{"name":"eth0","type":"ethernet","state":"up","mtu":1500,"mac-address":"52:54:00:%02x:%02x:00","ipv4":{"enabled":true,"dhcp":false,"address":[{"ip":"192.168.%d.%d","prefix-length":16}]},"ipv6":{"enabled":true,"autoconf":false,"address":[{"ip":"fd00::%x","prefix-length":64}]}},`+
			`{"name":"eth1","type":"ethernet","state":"up","mtu":9000,"mac-address":"52:54:00:%02x:%02x:01","ipv4":{"enabled":true,"dhcp":false,"address":[{"ip":"10.97.%d.%d","prefix-length":16}]}},`+
			`{"name":"lo","type":"loopback","state":"up","mtu":65536,"ipv4":{"enabled":true,"address":[{"ip":"127.0.0.1","prefix-length":8}]}}],`+
			`"routes":{"running":[%s]}}`,
			i/256, i%256, i/250, i%250+1, i+1, i/256, i%256, i/250, i%250+1, strings.Join(routes, ","))
		Expect(envtest.PublishState(ctx, k, name, state, time.Now())).To(Succeed())
	}
	b.Cleanup(func() {
		for i := range nodes {
			name := fmt.Sprintf("bench-node-%d", i)
			_ = k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			_ = k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
}

package claim_test

import (
	"flag"
	"fmt"
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
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var claimCount = flag.Int("claims.n", 1000, "claims BenchmarkClaims creates against one pool")

// BenchmarkClaims creates claims.n IPAddressClaims of one NodeIPPool at
// once and waits until every one has its IPAddress and is Ready. It
// reports the pool writes per claim (every change of the pool's
// resourceVersion, the pool controller's included), the time per claim,
// and that time as a ratio of the floor measured in the same run: as many
// ConfigMaps created one after another, the least a provider that writes
// one object per claim costs on this API server.
//
//	make bench-claims CLAIMS=1000
func BenchmarkClaims(b *testing.B) {
	RegisterTestingT(b)
	n := *claimCount
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

		start = time.Now()
		for j := range n {
			Expect(k.Create(ctx, newClaim(ns, fmt.Sprintf("m%d-eth0-0", j), pool))).To(Succeed())
		}
		Eventually(func() int {
			list := capi.NewClaimList(version)
			if err := k.List(ctx, list, client.InNamespace(ns)); err != nil {
				return -1
			}
			ready := 0
			for i := range list.Items {
				if ref, _, _ := unstructured.NestedString(list.Items[i].Object, "status", "addressRef", "name"); ref != "" {
					ready++
				}
			}
			return ready
		}, 10*time.Minute, time.Second).Should(Equal(n))
		served := time.Since(start)
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

package pool_test

import (
	"fmt"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
)

// TestConcurrentQuarantinesAllLand: many nodes' addresses quarantined at
// once through one writer (as the controller does when many Nodes are
// deleted together) share pool writes, and every one of them lands with
// its own holder and its bit set; each caller learns what it quarantined.
func TestConcurrentQuarantinesAllLand(t *testing.T) {
	RegisterTestingT(t)
	createPool(t, "qgroup", ippoolv1.IPRange{CIDR: "10.63.0.0/24"})
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	const n = 30
	var wg sync.WaitGroup
	got := make([]ippoolv1.EnactmentIPPools, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			holder := poolwrite.Holder{Node: fmt.Sprintf("gone%02d", i), Ref: holder.ForEnactment(fmt.Sprintf("gone%02d.p", i))}
			got[i], errs[i] = w.Quarantine(ctx, holder, ippoolv1.EnactmentIPPools{
				"qgroup": {Allocated: []string{fmt.Sprintf("10.63.0.%d", i+1)}}})
		}()
	}
	close(start)
	wg.Wait()
	var want []string
	holderOf := map[string]string{}
	for i := range n {
		ip := fmt.Sprintf("10.63.0.%d", i+1)
		want = append(want, ip)
		holderOf[ip] = fmt.Sprintf("gone%02d", i)
		Expect(errs[i]).NotTo(HaveOccurred())
		Expect(got[i]).To(Equal(ippoolv1.EnactmentIPPools{"qgroup": {Allocated: []string{ip}}}))
	}
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: "qgroup"}, &p)).To(Succeed())
	Expect(p.Status.Quarantined).To(HaveLen(n))
	for _, q := range p.Status.Quarantined {
		Expect(q.Node).To(Equal(holderOf[q.IP]), q.IP)
		Expect(q.HolderName()).To(Equal(q.Node+".p"), q.IP)
	}
	Expect(bits("qgroup")).To(ConsistOf(want))
}

package poolwrite_test

import (
	"context"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var k client.Client

// TestMain runs the package against a real API server: the writer is the
// storage of the pools' status, tested where it lives.
func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, func(s *envtest.Suite) { k = s.Client }))
}

var ctx = context.Background()

func newPool(name, cidr string) *ippoolv1.NodeIPPool {
	p, err := envtest.VouchedPool(ctx, k, name, cidr)
	Expect(err).NotTo(HaveOccurred())
	return p
}

func getPool(name string) *ippoolv1.NodeIPPool {
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &p)).To(Succeed())
	return &p
}

// TestQuarantineFollowsARecreatedPool: a pool deleted and re-created
// between the list of pools and the quarantine's write gets the quarantine
// in its new incarnation, which hands the address out: the writer lists
// again rather than letting the address go unprotected.
func TestQuarantineFollowsARecreatedPool(t *testing.T) {
	RegisterTestingT(t)
	old := newPool("recreated", "10.82.0.0/24")
	var replaced atomic.Bool
	reader := interceptor.NewClient(envtest.WithoutWatch{Client: k}, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList,
		opts ...client.ListOption) error {
		err := c.List(ctx, list, opts...)
		if _, ok := list.(*ippoolv1.NodeIPPoolList); ok && err == nil && !replaced.Swap(true) {
			Expect(k.Delete(ctx, old)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(old), &ippoolv1.NodeIPPool{}))
			}).
				Should(BeTrue())
			newPool("recreated", "10.82.0.0/24")
		}
		return err
	}})
	w := poolwrite.NewWriter(reader, k, clock.RealClock{})
	q, err := w.Quarantine(ctx, poolwrite.Holder{Node: "node01", Ref: holder.ForEnactment("node01.p")},
		ippoolv1.EnactmentIPPools{"recreated": {Allocated: []string{"10.82.0.9"}}})
	Expect(err).NotTo(HaveOccurred())
	Expect(q).To(Equal(ippoolv1.EnactmentIPPools{"recreated": {Allocated: []string{"10.82.0.9"}}}))
	now := getPool("recreated")
	Expect(now.UID).NotTo(Equal(old.UID))
	Expect(poolstatus.QuarantineOf(now, "10.82.0.9")).To(HaveField("Node", "node01"))
	alloc, err := poolstatus.Allocator(now)
	Expect(err).NotTo(HaveOccurred())
	Expect(alloc.HasIP(netip.MustParseAddr("10.82.0.9"))).To(BeTrue())
	Expect(poolstatus.Vouched(now)).To(BeTrue())
}

// TestQuarantineIsIdempotent: quarantining an address again keeps its
// entry as it is (a retirer that retries after its record's removal
// failed), and reports nothing new.
func TestQuarantineIsIdempotent(t *testing.T) {
	RegisterTestingT(t)
	newPool("again", "10.83.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	record := ippoolv1.EnactmentIPPools{"again": {Allocated: []string{"10.83.0.9"}}}
	q, err := w.Quarantine(ctx, poolwrite.Holder{Node: "node01", Ref: holder.ForEnactment("node01.p"), Captures: map[string]string{"10.83.0.9": "addr"}}, record)
	Expect(err).NotTo(HaveOccurred())
	Expect(q).To(HaveKey("again"))
	first := poolstatus.QuarantineOf(getPool("again"), "10.83.0.9")
	q, err = w.Quarantine(ctx, poolwrite.Holder{Node: "node01", Ref: holder.ForEnactment("node01.p")}, record)
	Expect(err).NotTo(HaveOccurred())
	Expect(q).To(BeEmpty())
	Expect(poolstatus.QuarantineOf(getPool("again"), "10.83.0.9")).To(Equal(first))
}

// TestWithdrawStaysInItsIncarnation: a withdrawal names the incarnation
// it took from, and leaves a re-created pool alone even when an entry
// there looks like its own.
func TestWithdrawStaysInItsIncarnation(t *testing.T) {
	RegisterTestingT(t)
	old := newPool("withdraw", "10.84.0.0/24")
	Expect(k.Delete(ctx, old)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(old), &ippoolv1.NodeIPPool{}))
	}).Should(BeTrue())
	newPool("withdraw", "10.84.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	_, err := w.Update(ctx, "withdraw", func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.84.0.1", Holder: "node01.p", Token: "7", Since: metav1.Now()})
		return true, alloc.AllocateIP(netip.MustParseAddr("10.84.0.1"))
	})
	Expect(err).NotTo(HaveOccurred())
	withdrawn, err := w.Withdraw(ctx, "withdraw", "node01.p", "7", []string{"10.84.0.1"}, poolwrite.Incarnation(old.UID))
	Expect(err).NotTo(HaveOccurred())
	Expect(withdrawn).To(BeEmpty())
	Expect(poolstatus.InFlightOf(getPool("withdraw"), "10.84.0.1")).NotTo(BeNil())
}

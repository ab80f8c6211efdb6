package poolwrite_test

import (
	"context"
	"fmt"
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
// again rather than letting the address go unprotected; in a pass that
// shares one list of the pools (OnePoolList) too.
func TestQuarantineFollowsARecreatedPool(t *testing.T) {
	t.Run("own list", func(t *testing.T) { quarantineFollowsARecreatedPool(t, ctx, "recreated", "10.82.0.0/24") })
	t.Run("list of the pass", func(t *testing.T) {
		quarantineFollowsARecreatedPool(t, poolwrite.OnePoolList(ctx), "recreated-in-pass", "10.92.0.0/24")
	})
}

func quarantineFollowsARecreatedPool(t *testing.T, ctx context.Context, name, cidr string) {
	RegisterTestingT(t)
	b := netip.MustParsePrefix(cidr).Addr().As4()
	b[3] = 9
	ip := netip.AddrFrom4(b).String()
	old := newPool(name, cidr)
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
			newPool(name, cidr)
		}
		return err
	}})
	w := poolwrite.NewWriter(reader, k, clock.RealClock{})
	q, err := w.Quarantine(ctx, poolwrite.Holder{Node: "node01", Ref: holder.ForEnactment("node01.p")},
		ippoolv1.EnactmentIPPools{name: {Allocated: []string{ip}}})
	Expect(err).NotTo(HaveOccurred())
	Expect(q).To(Equal(ippoolv1.EnactmentIPPools{name: {Allocated: []string{ip}}}))
	now := getPool(name)
	Expect(now.UID).NotTo(Equal(old.UID))
	Expect(poolstatus.QuarantineOf(now, ip)).To(HaveField("Node", "node01"))
	alloc, err := poolstatus.Allocator(now)
	Expect(err).NotTo(HaveOccurred())
	Expect(alloc.HasIP(netip.MustParseAddr(ip))).To(BeTrue())
	Expect(poolstatus.Vouched(now)).To(BeTrue())
}

// TestOnePoolListIsReadOncePerPass: the releases of many holders in one
// pass (OnePoolList) list the pools once, not once per holder, and every
// address is still quarantined in its pool and confirmed there, though
// the list the confirmations share was read before the quarantines.
func TestOnePoolListIsReadOncePerPass(t *testing.T) {
	RegisterTestingT(t)
	newPool("pass-a", "10.93.0.0/24")
	newPool("pass-b", "10.94.0.0/24")
	var lists atomic.Int32
	reader := interceptor.NewClient(envtest.WithoutWatch{Client: k}, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList,
		opts ...client.ListOption) error {
		if _, ok := list.(*ippoolv1.NodeIPPoolList); ok {
			lists.Add(1)
		}
		return c.List(ctx, list, opts...)
	}})
	w := poolwrite.NewWriter(reader, k, clock.RealClock{})
	pass := poolwrite.OnePoolList(ctx)
	type released struct {
		holder poolwrite.Holder
		record ippoolv1.EnactmentIPPools
	}
	var all []released
	for i := range 6 {
		node := fmt.Sprintf("node%02d", i)
		pool, ip := "pass-a", fmt.Sprintf("10.93.0.%d", 10+i)
		if i%2 == 1 {
			pool, ip = "pass-b", fmt.Sprintf("10.94.0.%d", 10+i)
		}
		r := released{poolwrite.Holder{Node: node, Ref: holder.ForEnactment(node + ".p")}, ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}}}
		q, err := w.Quarantine(pass, r.holder, r.record)
		Expect(err).NotTo(HaveOccurred())
		Expect(q).To(Equal(r.record))
		all = append(all, r)
	}
	for _, r := range all {
		Expect(w.ConfirmRelease(pass, r.holder, r.record)).To(Succeed())
	}
	Expect(lists.Load()).To(BeEquivalentTo(1), "one list of the pools for the pass")
	for _, r := range all {
		for pool, a := range r.record {
			q := poolstatus.QuarantineOf(getPool(pool), a.Allocated[0])
			Expect(q).NotTo(BeNil(), "%s in %s", a.Allocated[0], pool)
			Expect(q.Node).To(Equal(r.holder.Node))
			Expect(q.StateSeenAtRelease).NotTo(BeNil(), "%s confirmed", a.Allocated[0])
			Expect(q.StateSeenAtRelease.Equal(&poolwrite.ReleaseConfirmed)).To(BeTrue(), "%s confirmed", a.Allocated[0])
		}
	}
	// Without a pass, each call lists the pools.
	before := lists.Load()
	_, err := w.Quarantine(ctx, all[0].holder, all[0].record)
	Expect(err).NotTo(HaveOccurred())
	Expect(w.ConfirmRelease(ctx, all[0].holder, all[0].record)).To(Succeed())
	Expect(lists.Load() - before).To(BeEquivalentTo(2))
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

// TestOnePoolListLooksAgainWhenBehind: a pass's list of the pools that no
// longer shows where an address is handed out is read again before the
// quarantine gives up on it: the pool a record names deleted and another
// created over its range, or a range widened to take the address in, after
// an earlier holder of the pass listed them.
func TestOnePoolListLooksAgainWhenBehind(t *testing.T) {
	RegisterTestingT(t)
	w := poolwrite.NewWriter(envtest.WithoutWatch{Client: k}, k, clock.RealClock{})
	first := func(pass context.Context, pool, ip string) {
		_, err := w.Quarantine(pass, poolwrite.Holder{Node: "first", Ref: holder.ForEnactment("first.p")},
			ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}})
		Expect(err).NotTo(HaveOccurred())
	}

	t.Run("pool replaced under another name", func(t *testing.T) {
		RegisterTestingT(t)
		old := newPool("behind-old", "10.95.0.0/24")
		pass := poolwrite.OnePoolList(ctx)
		first(pass, "behind-old", "10.95.0.5")
		Expect(k.Delete(ctx, old)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(old), &ippoolv1.NodeIPPool{}))
		}).Should(BeTrue())
		newPool("behind-new", "10.95.0.0/24")
		q, err := w.Quarantine(pass, poolwrite.Holder{Node: "node02", Ref: holder.ForEnactment("node02.p")},
			ippoolv1.EnactmentIPPools{"behind-old": {Allocated: []string{"10.95.0.9"}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(q).To(Equal(ippoolv1.EnactmentIPPools{"behind-new": {Allocated: []string{"10.95.0.9"}}}))
		Expect(poolstatus.QuarantineOf(getPool("behind-new"), "10.95.0.9")).To(HaveField("Node", "node02"))
	})

	t.Run("range widened", func(t *testing.T) {
		RegisterTestingT(t)
		p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "behind-wide"},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.96.0.0/24", Start: "10.96.0.10", End: "10.96.0.20"}}}
		Expect(k.Create(ctx, p)).To(Succeed())
		_, err := poolwrite.NewWriter(k, k, clock.RealClock{}).Update(ctx, p.Name,
			func(*ippoolv1.NodeIPPool, *ippool.Allocator) (bool, error) { return true, nil }, poolwrite.Vouch(func(error) {}))
		Expect(err).NotTo(HaveOccurred())
		pass := poolwrite.OnePoolList(ctx)
		first(pass, "behind-wide", "10.96.0.11")
		p = getPool("behind-wide")
		p.Spec.Range.End = "10.96.0.40"
		Expect(k.Update(ctx, p)).To(Succeed())
		q, err := w.Quarantine(pass, poolwrite.Holder{Node: "node02", Ref: holder.ForEnactment("node02.p")},
			ippoolv1.EnactmentIPPools{"behind-wide": {Allocated: []string{"10.96.0.30"}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(q).To(Equal(ippoolv1.EnactmentIPPools{"behind-wide": {Allocated: []string{"10.96.0.30"}}}))
	})
}

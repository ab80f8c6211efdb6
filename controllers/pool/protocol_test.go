package pool_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// recordWatch wraps the pool controller's client: on the first record it
// writes (of the enactment bumpFor, if set), it changes the enactment first
// (as its handler may at that very moment), and it notes, for every
// record, whether it was written under the token of an in-flight entry of
// the pool.
type recordWatch struct {
	mu      sync.Mutex
	bumpFor string
	bumped  bool
	records []string
}

func (w *recordWatch) intercept(pool string) interceptor.Funcs {
	return interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object,
		opts ...client.SubResourceUpdateOption) error {
		e, ok := obj.(*nncev1beta1.NodeNetworkConfigurationEnactment)
		if !ok || sub != "status" {
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.bumped && (w.bumpFor == "" || w.bumpFor == e.Name) {
			w.bumped = true
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`))
			Expect(c.Patch(ctx, e.DeepCopy(), patch)).To(Succeed())
		}
		// From the API server: the controller's cache may not have seen
		// the pool write that added the entry yet.
		var p ippoolv1.NodeIPPool
		Expect(k.Get(ctx, types.NamespacedName{Name: pool}, &p)).To(Succeed())
		underToken := slices.ContainsFunc(p.Status.InFlight, func(f ippoolv1.InFlightAddress) bool {
			return f.HolderName() == e.Name && f.Token == e.ResourceVersion
		})
		err := c.SubResource(sub).Update(ctx, obj, opts...)
		if err == nil {
			w.records = append(w.records, fmt.Sprintf("%s under its token: %v", e.Name, underToken))
		}
		return err
	}}
}

// TestControllerRecordsUnderTheToken: the pool controller records the
// addresses it served only under the token of their in-flight entries, as
// a handler does: when the enactment changed since it was read, the record
// fails, the addresses are withdrawn, and the enactment is served again
// under a new token. A record under a newer resourceVersion would escape
// the fence a revocation writes.
func TestControllerRecordsUnderTheToken(t *testing.T) {
	RegisterTestingT(t)
	watch := &recordWatch{}
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Pools.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.Pools.Client}, watch.intercept("token"))
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	createPool(t, "token", ippoolv1.IPRange{CIDR: "10.77.0.0/24", Start: "10.77.0.1", End: "10.77.0.8"})
	Eventually(available("token")).Should(HavePrefix("True"))
	createPolicy(t, "token", "token", "token")
	// The handler waits for the controller, however long it takes.
	addNodeWith(t, t.TempDir(), "token01", "token", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.FailedRequeue = time.Hour }
	})
	Eventually(enactmentState("token01.token")).Should(HavePrefix("Available"))
	watch.mu.Lock()
	defer watch.mu.Unlock()
	Expect(watch.bumped).To(BeTrue())
	Expect(watch.records).To(ConsistOf("token01.token under its token: true"))
	assertIndexed("token")
}

// skewed is a clock that runs behind the real one.
type skewed struct {
	clock.RealClock
	by time.Duration
}

func (s skewed) Now() time.Time                  { return time.Now().Add(-s.by) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// TestSkewedNodeClock: a node whose clock runs an hour behind releases an
// address it cannot take off. Its quarantine is timed on the pool
// controller's clock, not the node's: it is not reported overdue at once,
// and it is never lifted while the node carries the address.
func TestSkewedNodeClock(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, 20*time.Second)
	createPool(t, "skew", ippoolv1.IPRange{CIDR: "10.78.0.0/24", Start: "10.78.0.1", End: "10.78.0.1"})
	Eventually(available("skew")).Should(HavePrefix("True"))
	createPolicy(t, "skew", "skew", "skew")
	holder := addNodeWith(t, t.TempDir(), "skew01", "skew", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) {
			r.Clock = skewed{by: time.Hour}
			r.Pools.Clock = r.Clock
		}
	})
	Eventually(enactmentState("skew01.skew")).Should(HavePrefix("Available"))
	Expect(os.WriteFile(holder.State+".fail", []byte("apply: NetworkManager is not answering\n"), 0o600)).To(Succeed())
	Expect(k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "skew"}})).To(Succeed())

	var q *ippoolv1.QuarantinedAddress
	Eventually(func() *metav1.Time {
		s := poolStatus("skew")
		if q = poolstatus.QuarantineOf(&ippoolv1.NodeIPPool{Status: s}, "10.78.0.1"); q == nil {
			return nil
		}
		return q.StateSeenAtRelease
	}).ShouldNot(BeNil())
	Expect(time.Since(q.Since.Time)).To(BeNumerically("<", time.Minute), "since is the controller's time, not the node's")
	Consistently(poolCondition("skew", ippoolv1.ConditionReleasesConfirmed), 10*time.Second).Should(HavePrefix("True"))
	Expect(bits("skew")).To(Equal([]string{"10.78.0.1"}))
	Expect(carried(holder)()).To(Equal([]string{"10.78.0.1/24"}))
}

// TestUnvouchedPoolDeleted: a pool whose bitmap was emptied by hand and
// that is deleted before the pool controller rebuilt it still goes: being
// deleted, it hands nothing out, and its entries are resolved all the same.
func TestUnvouchedPoolDeleted(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t, nil)
	createPool(t, "unvouched", ippoolv1.IPRange{CIDR: "10.79.0.0/24"})
	Eventually(available("unvouched")).Should(HavePrefix("True"))
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "stalled01.unvouched"}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	takeInFlight("unvouched", "10.79.0.1", e.Name, e.ResourceVersion)
	stop()
	setBits("unvouched")
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "unvouched"}}
	Expect(k.Delete(ctx, p)).To(Succeed())
	startController(t, nil)
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(p), p)) }).Should(BeTrue())
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Annotations).To(HaveKey(ippoolv1.FenceAnnotation), "its allocation in flight was revoked first")
}

// TestFailedReturnStaysQuarantined: an address handed back to its former
// holder (the same enactment asking again for the same capture) stays
// quarantined until the return is recorded. When the record fails, the
// withdrawal frees nothing: another node waiting on the full pool does not
// get the address the former holder still carries.
func TestFailedReturnStaysQuarantined(t *testing.T) {
	RegisterTestingT(t)
	watch := &recordWatch{bumpFor: "back01.back"}
	// Every pool write the controller makes from the return on keeps the
	// address set, as a quarantine or a record.
	var returning atomic.Bool
	var freed []string
	var mu sync.Mutex
	keptSet := interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object,
		opts ...client.SubResourceUpdateOption) error {
		err := c.SubResource(sub).Update(ctx, obj, opts...)
		if p, ok := obj.(*ippoolv1.NodeIPPool); ok && err == nil && p.Name == "back" && returning.Load() {
			alloc, aerr := poolstatus.Allocator(p)
			if aerr == nil && !alloc.HasIP(netip.MustParseAddr("10.85.0.1")) {
				mu.Lock()
				freed = append(freed, fmt.Sprintf("quarantined %v, in flight %v", p.Status.Quarantined, p.Status.InFlight))
				mu.Unlock()
			}
		}
		return err
	}}
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Pools.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.Pools.Client}, watch.intercept("back"))
		pc.Pools.Pools.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.Pools.Pools.Client}, keptSet)
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	claim(t, "ghost", "back", "10.85.0.2")
	createPool(t, "back", ippoolv1.IPRange{CIDR: "10.85.0.0/24", Start: "10.85.0.1", End: "10.85.0.2"})
	Eventually(available("back")).Should(HavePrefix("True"))
	createPolicy(t, "back", "back", "back")
	// The holder waits for the controller, however long it takes.
	holder := addNodeWith(t, t.TempDir(), "back01", "back", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.FailedRequeue = time.Hour }
	})
	Eventually(enactmentState("back01.back")).Should(HavePrefix("Available"))
	watch.mu.Lock()
	watch.bumped = false // the first record was the first allocation's
	watch.mu.Unlock()

	// The holder cannot take the address off: it stays quarantined for it.
	Expect(os.WriteFile(holder.State+".fail", []byte("apply: NetworkManager is not answering\n"), 0o600)).To(Succeed())
	relabel("back01", "elsewhere")
	Eventually(func() *ippoolv1.QuarantinedAddress { s := poolStatus("back"); return quarantined(&s, "10.85.0.1") }).
		Should(HaveField("HolderName()", "back01.back"))
	createPolicy(t, "back-other", "back-other", "back")
	addNode(t, t.TempDir(), "back02", "back-other")
	Eventually(enactmentState("back02.back-other")).Should(ContainSubstring("is exhausted"))

	// The holder comes back: its return's first record meets a change.
	returning.Store(true)
	relabel("back01", "back")
	Eventually(func() []string { return held("back01.back", "back") }).Should(Equal([]string{"10.85.0.1"}))
	watch.mu.Lock()
	Expect(watch.bumped).To(BeTrue(), "the return's record met a change")
	watch.mu.Unlock()
	Consistently(enactmentState("back02.back-other"), 2*time.Second).Should(ContainSubstring("is exhausted"))
	Expect(held("back02.back-other", "back")).To(BeEmpty())
	mu.Lock()
	defer mu.Unlock()
	Expect(freed).To(BeEmpty(), "10.85.0.1 was free while its holder carried it")
}

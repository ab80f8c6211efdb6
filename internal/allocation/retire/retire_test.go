package retire_test

import (
	"context"
	"net/netip"
	"os"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/retire"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var k client.Client

// TestMain runs the package against a real API server: retire is the
// storage protocol of a release, tested where it lives.
func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, func(s *envtest.Suite) { k = s.Client }))
}

var ctx = context.Background()

// availablePool creates a pool whose status the pool controller would
// vouch for.
func availablePool(t *testing.T, name, cidr string) {
	t.Helper()
	p, err := envtest.VouchedPool(ctx, k, name, cidr)
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
}

// holding creates a node's enactment that records ip of pool for the
// capture addr, with the finalizer a handler puts on it, and sets the bit.
func holding(t *testing.T, node, pool, ip string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	t.Helper()
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: node + ".p",
		Labels:     map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: "p"},
		Finalizers: []string{ippoolv1.FinalizerIPPool}}}
	Expect(envtest.CreateForTest(t, k, e)).To(Succeed())
	addr := capture.Address{IP: netip.MustParseAddr(ip), PrefixLength: 24}
	e.Status.IPPool = ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}}
	e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{"addr": {State: shared.NewState(string(addr.State()))}}
	Expect(k.Status().Update(ctx, e)).To(Succeed())
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	_, err := w.Update(ctx, pool, func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		return true, alloc.AllocateIP(addr.IP)
	})
	Expect(err).NotTo(HaveOccurred())
	return e
}

// failingPools is a writer whose pool status writes fail while fault is
// set, as when the API server refuses them or the process dies first.
func failingPools(fault *envtest.PoolWriteFault) *poolwrite.Writer {
	return envtest.FailingPoolWrites(poolwrite.NewWriter(k, k, clock.RealClock{}), fault)
}

func quarantineOf(pool, ip string) *ippoolv1.QuarantinedAddress {
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: pool}, &p)).To(Succeed())
	return poolstatus.QuarantineOf(&p, ip)
}

// TestRetireQuarantinesBeforeTheRecordGoes: while the quarantine cannot be
// written, Retire fails and the enactment keeps its finalizer and its
// record, so the address stays claimed; once it can, the quarantine is
// written, then the enactment goes, and the quarantine keeps the address
// for the enactment's return.
func TestRetireQuarantinesBeforeTheRecordGoes(t *testing.T) {
	RegisterTestingT(t)
	availablePool(t, "retire", "10.80.0.0/24")
	e := holding(t, "node01", "retire", "10.80.0.7")
	var fail envtest.PoolWriteFault
	fail.On.Store(true)
	w := failingPools(&fail)

	_, err := retire.Retire(ctx, w, e)
	Expect(err).To(MatchError(ContainSubstring("quarantine 10.80.0.7 of enactment node01.p before its record goes")))
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.DeletionTimestamp.IsZero()).To(BeFalse())
	Expect(e.Finalizers).To(ContainElement(ippoolv1.FinalizerIPPool))
	Expect(e.Status.IPPool["retire"].Allocated).To(Equal([]string{"10.80.0.7"}), "the record stays")
	Expect(quarantineOf("retire", "10.80.0.7")).To(BeNil())

	fail.On.Store(false)
	q, err := retire.Retire(ctx, w, e)
	Expect(err).NotTo(HaveOccurred())
	Expect(q).To(Equal(ippoolv1.EnactmentIPPools{"retire": {Allocated: []string{"10.80.0.7"}}}))
	Expect(apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(e), e))).To(BeTrue())
	Expect(quarantineOf("retire", "10.80.0.7")).To(And(HaveField("Node", "node01"), HaveField("HolderName()", "node01.p"),
		HaveField("Capture", "addr")))
}

// TestDropQuarantinesBeforeTheRecordGoes: a reset's Drop quarantines the
// address for nobody's return before the record loses it, and while it
// cannot, the record keeps it.
func TestDropQuarantinesBeforeTheRecordGoes(t *testing.T) {
	RegisterTestingT(t)
	availablePool(t, "drop", "10.81.0.0/24")
	e := holding(t, "node02", "drop", "10.81.0.7")
	var fail envtest.PoolWriteFault
	fail.On.Store(true)
	w := failingPools(&fail)

	_, err := retire.Drop(ctx, w, e.Name, "drop")
	Expect(err).To(MatchError(ContainSubstring("before its record goes")))
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Status.IPPool["drop"].Allocated).To(Equal([]string{"10.81.0.7"}), "the record stays")

	fail.On.Store(false)
	dropped, err := retire.Drop(ctx, w, e.Name, "drop")
	Expect(err).NotTo(HaveOccurred())
	Expect(dropped).To(Equal([]string{"10.81.0.7"}))
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Status.IPPool).NotTo(HaveKey("drop"))
	Expect(e.Status.CapturedStates).NotTo(HaveKey("addr"))
	Expect(quarantineOf("drop", "10.81.0.7")).To(And(HaveField("Node", "node02"), HaveField("Capture", ""),
		HaveField("Interface", "")))
}

// TestReleaseQuarantinesBeforeTheRecordGoes: addresses an enactment
// releases (its handler's new record no longer uses them) are quarantined
// for nobody's return before the record lets them go; while that cannot
// be written, the record keeps them, still releasing, and what the
// enactment still uses is never touched.
func TestReleaseQuarantinesBeforeTheRecordGoes(t *testing.T) {
	RegisterTestingT(t)
	availablePool(t, "release", "10.82.0.0/24")
	e := holding(t, "node03", "release", "10.82.0.7")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	_, err := w.Update(ctx, "release", func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		return true, alloc.AllocateIP(netip.MustParseAddr("10.82.0.8"))
	})
	Expect(err).NotTo(HaveOccurred())
	// The handler's new record: the capture now holds .8, .7 is released.
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	enactmentrecord.Add(e, capture.Ref{Capture: "addr", Pool: "release"}, capture.Address{IP: netip.MustParseAddr("10.82.0.8"), PrefixLength: 24},
		shared.NodeNetworkConfigurationEnactmentMetaInfo{})
	Expect(e.Status.IPPool["release"]).To(Equal(ippoolv1.PoolAllocation{Allocated: []string{"10.82.0.8"}, Releasing: []string{"10.82.0.7"}}))
	Expect(k.Status().Update(ctx, e)).To(Succeed())

	var fail envtest.PoolWriteFault
	fail.On.Store(true)
	_, err = retire.Release(ctx, failingPools(&fail), e.Name)
	Expect(err).To(MatchError(ContainSubstring("quarantine 10.82.0.7 of enactment node03.p before its record goes")))
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Status.IPPool["release"].Releasing).To(Equal([]string{"10.82.0.7"}), "the record keeps it")
	Expect(quarantineOf("release", "10.82.0.7")).To(BeNil())

	fail.On.Store(false)
	released, err := retire.Release(ctx, failingPools(&fail), e.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(released).To(Equal(ippoolv1.EnactmentIPPools{"release": {Releasing: []string{"10.82.0.7"}}}))
	Expect(k.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
	Expect(e.Status.IPPool["release"]).To(Equal(ippoolv1.PoolAllocation{Allocated: []string{"10.82.0.8"}}))
	Expect(quarantineOf("release", "10.82.0.7")).To(And(HaveField("Node", "node03"), HaveField("Capture", "")))
	Expect(quarantineOf("release", "10.82.0.8")).To(BeNil())

	again, err := retire.Release(ctx, w, e.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(again).To(BeNil(), "nothing left to release")
}

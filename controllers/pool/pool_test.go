package pool_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	env *envtest.Env
	k   client.Client
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	var err error
	if env, err = envtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if k, err = client.New(env.Config, client.Options{Scheme: env.Scheme}); err == nil {
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, err)
	}
	_ = env.Stop()
	os.Exit(code)
}

func init() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
}

// startController runs a pool controller until the test ends or stop is
// called.
func startController(t *testing.T) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: func() *bool { b := true; return &b }()}})
	Expect(err).NotTo(HaveOccurred())
	Expect(pool.New(mgr).SetupWithManager(mgr, true)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			cancel()
			<-done
			stopped = true
		}
	}
	t.Cleanup(stop)
	return stop
}

// claim creates an enactment that records ips from a pool, as a handler
// would.
func claim(t *testing.T, name, poolName string, ips ...string) {
	t.Helper()
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(k.Create(context.Background(), e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(context.Background(), e) })
	e.Status.IPPool = ippoolv1.EnactmentIPPools{poolName: {Allocated: ips}}
	Expect(k.Status().Update(context.Background(), e)).To(Succeed())
}

func createPool(t *testing.T, name string, r ippoolv1.IPRange) {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}}
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { deletePool(name) })
}

func deletePool(name string) {
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_ = k.Delete(context.Background(), p)
	Eventually(func() bool { return k.Get(context.Background(), types.NamespacedName{Name: name}, p) != nil }).Should(BeTrue())
}

// available returns "Status Reason: message" of the pool's Available
// condition.
func available(name string) func() string {
	return func() string {
		var p ippoolv1.NodeIPPool
		if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionAvailable)
		if c == nil {
			return "none"
		}
		return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
}

// bits returns the addresses set in a pool's bitmap.
func bits(name string) []string {
	var p ippoolv1.NodeIPPool
	if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
		return []string{err.Error()}
	}
	r := p.Spec.Range
	a := ippool.NewAllocator(ippool.MustNewRange(ippool.Spec{CIDR: r.CIDR, Start: r.Start, End: r.End, Exclude: r.Exclude}))
	if err := a.Restore(p.Status.AllocatedOffsets); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for o := range a.Offsets() {
		ip, _ := a.Range().IP(o)
		out = append(out, ip.String())
	}
	if int64(a.Count()) != p.Status.Allocated || p.Status.Free != p.Status.Size-p.Status.Allocated {
		return []string{"counts disagree with the bitmap"}
	}
	return out
}

// TestRecreatedPoolKeepsAddresses is the specification's "exhausted →
// re-create" path: a new pool is rebuilt from the enactments before it
// serves anyone, so every address that still fits is kept.
func TestRecreatedPoolKeepsAddresses(t *testing.T) {
	RegisterTestingT(t)
	startController(t)
	claim(t, "n1.keep", "keep", "10.1.0.2")
	claim(t, "n2.keep", "keep", "10.1.0.3")
	createPool(t, "keep", ippoolv1.IPRange{CIDR: "10.1.0.0/24", Start: "10.1.0.1", End: "10.1.0.3"})
	Eventually(available("keep")).Should(Equal("True ReconciledPool: The pool is up to date"))
	Expect(bits("keep")).To(Equal([]string{"10.1.0.2", "10.1.0.3"}))

	deletePool("keep")
	createPool(t, "keep", ippoolv1.IPRange{CIDR: "10.1.0.0/24", Start: "10.1.0.1", End: "10.1.0.50"})
	Eventually(available("keep")).Should(HavePrefix("True ReconciledPool"))
	Expect(bits("keep")).To(Equal([]string{"10.1.0.2", "10.1.0.3"}))

	// Smaller: the address that no longer fits is not indexed; its handler
	// allocates again.
	deletePool("keep")
	createPool(t, "keep", ippoolv1.IPRange{CIDR: "10.1.0.0/24", Start: "10.1.0.1", End: "10.1.0.2"})
	Eventually(available("keep")).Should(HavePrefix("True ReconciledPool"))
	Expect(bits("keep")).To(Equal([]string{"10.1.0.2"}))
}

// TestResetKeepsUnclaimedBitsAndRemovesAnnotation: a reset rebuilds, sets
// claimed bits, never clears an unclaimed one on the spot, and removes the
// annotation so that admins can wait for it.
func TestResetKeepsUnclaimedBitsAndRemovesAnnotation(t *testing.T) {
	RegisterTestingT(t)
	startController(t)
	createPool(t, "reset", ippoolv1.IPRange{CIDR: "10.2.0.0/24"})
	Eventually(available("reset")).Should(HavePrefix("True"))

	// A bit set by hand (or by an allocation in flight) and a claim whose
	// bit was lost.
	var p ippoolv1.NodeIPPool
	Expect(k.Get(context.Background(), types.NamespacedName{Name: "reset"}, &p)).To(Succeed())
	a := ippool.NewAllocator(ippool.MustNewRange(ippool.Spec{CIDR: "10.2.0.0/24"}))
	Expect(a.AllocateIP(mustAddr("10.2.0.9"))).To(Succeed())
	p.Status.AllocatedOffsets = a.Snapshot()
	Expect(k.Status().Update(context.Background(), &p)).To(Succeed())
	claim(t, "n1.reset", "reset", "10.2.0.4")

	Expect(k.Get(context.Background(), types.NamespacedName{Name: "reset"}, &p)).To(Succeed())
	p.Annotations = map[string]string{ippoolv1.ResetIPPoolAnnotation: ""}
	Expect(k.Update(context.Background(), &p)).To(Succeed())
	Eventually(func() map[string]string {
		_ = k.Get(context.Background(), types.NamespacedName{Name: "reset"}, &p)
		return p.Annotations
	}).ShouldNot(HaveKey(ippoolv1.ResetIPPoolAnnotation))
	Eventually(available("reset")).Should(HavePrefix("True ReconciledPool"))
	Expect(bits("reset")).To(Equal([]string{"10.2.0.4", "10.2.0.9"}))
}

// TestStartupRebuild: a claim recorded while no controller ran is indexed
// when one starts.
func TestStartupRebuild(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t)
	createPool(t, "startup", ippoolv1.IPRange{CIDR: "10.3.0.0/24"})
	Eventually(available("startup")).Should(HavePrefix("True"))
	stop()
	claim(t, "n1.startup", "startup", "10.3.0.7")
	Expect(bits("startup")).To(BeEmpty())
	startController(t)
	Eventually(func() []string { return bits("startup") }).Should(Equal([]string{"10.3.0.7"}))
	Eventually(available("startup")).Should(HavePrefix("True ReconciledPool"))
}

// TestOverlapAndCollision: the newer of two overlapping pools is refused
// naming the older; two enactments holding one address are reported by name.
func TestOverlapAndCollision(t *testing.T) {
	RegisterTestingT(t)
	startController(t)
	createPool(t, "older", ippoolv1.IPRange{CIDR: "10.4.0.0/24", Start: "10.4.0.1", End: "10.4.0.20"})
	Eventually(available("older")).Should(HavePrefix("True"))
	// creationTimestamp has a resolution of one second; within one second
	// the name decides, and "newer" sorts first.
	time.Sleep(1100 * time.Millisecond)
	createPool(t, "newer", ippoolv1.IPRange{CIDR: "10.4.0.0/16", Start: "10.4.0.20", End: "10.4.1.20"})
	Eventually(available("newer")).Should(Equal("False OverlappingIPPool: The NodeIPPool older is overlapping with this one; " +
		"delete this pool or re-create it with a range outside older's"))
	Consistently(available("older"), time.Second).Should(HavePrefix("True"))

	// Deleting the older pool lets the newer one serve.
	deletePool("older")
	Eventually(available("newer")).Should(HavePrefix("True ReconciledPool"))

	claim(t, "n1.newer", "newer", "10.4.0.30")
	claim(t, "n2.newer", "newer", "10.4.0.30")
	Eventually(available("newer")).Should(Equal("False IPCollision: IP collision: 10.4.0.30 is held by n1.newer and n2.newer; " +
		"fix or reset the enactments involved"))
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

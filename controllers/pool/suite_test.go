package pool_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// grace is the garbage collection grace period, and the quarantine period,
// of the controllers these tests start.
const grace = 3 * time.Second

var (
	env    *envtest.Env
	k      client.Client
	simBin string
)

// TestMain runs the package on a control plane with the NodeIPPool
// webhook installed and served, as the pool controller serves it: every
// pool the tests create or change passes through it.
func TestMain(m *testing.M) {
	os.Exit(envtest.RunWith(m, []envtest.Option{envtest.WithWebhook()}, func(s *envtest.Suite) {
		env, k, simBin = s.Env, s.Client, s.Command("nmstatectl-sim")
		if _, err := env.StartWebhook(); err != nil {
			panic(err) // the suite cannot run without it
		}
	}, "nmstatectl-sim"))
}

func init() {
	SetDefaultEventuallyTimeout(45 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
}

var ctx = context.Background()

// startController runs a pool controller until the test ends or stop is
// called.
func startController(t *testing.T, metrics *pool.Metrics) (stop func()) {
	t.Helper()
	pc, err := env.StartPoolController(grace, metrics)
	Expect(err).NotTo(HaveOccurred())
	stop = func() { Expect(pc.Stop()).To(Succeed()) }
	t.Cleanup(func() { _ = pc.Stop() })
	return stop
}

// newNodes creates Nodes prefix01..prefixNN labelled role=prefix and starts
// their handlers, each adjusted first by adjust, if given.
func newNodes(t *testing.T, prefix string, n int, adjust ...func(*envtest.Node)) []*envtest.Node {
	t.Helper()
	dir := t.TempDir()
	nodes := make([]*envtest.Node, n)
	for i := range nodes {
		nodes[i] = addNodeWith(t, dir, fmt.Sprintf("%s%02d", prefix, i+1), prefix, func(nd *envtest.Node) {
			for _, f := range adjust {
				f(nd)
			}
		})
	}
	return nodes
}

func addNode(t *testing.T, dir, name, role string) *envtest.Node {
	t.Helper()
	return addNodeWith(t, dir, name, role, func(*envtest.Node) {})
}

// addNodeWith is addNode with the node adjusted before its handler starts.
func addNodeWith(t *testing.T, dir, name, role string, adjust func(*envtest.Node)) *envtest.Node {
	t.Helper()
	Expect(k.Create(ctx, newNode(name, role))).To(Succeed())
	nd := envtest.NewNode(name, dir, simBin)
	adjust(nd)
	Expect(nd.Start(env)).To(Succeed())
	t.Cleanup(func() {
		_ = nd.Stop()
		_ = k.Delete(ctx, newNode(name, role))
	})
	return nd
}

func newNode(name, role string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": role}}}
}

func createPool(t *testing.T, name string, r ippoolv1.IPRange) {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}}
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteObject(p) })
}

// createIdlePool creates an available pool with a controller that is then
// stopped: what happens next happens with no pool controller running.
func createIdlePool(t *testing.T, name, cidr string) {
	t.Helper()
	stop := startController(t, nil)
	createPool(t, name, ippoolv1.IPRange{CIDR: cidr})
	Eventually(available(name)).Should(HavePrefix("True"))
	stop()
}

// laterSecond waits until the clock is past the second in which o was
// created, so that an object created next is younger by its creation time.
func laterSecond(o client.Object) {
	Expect(k.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
	created := o.GetCreationTimestamp().Time
	Eventually(func() bool { return time.Now().After(created.Add(time.Second)) }).Should(BeTrue())
}

// deleteObject deletes an object and waits until it is gone. A pool
// keeps its finalizer until a pool controller lets it go, and a test's
// controller may be stopped by then: the finalizer is taken off by hand.
func deleteObject(o client.Object) {
	_ = k.Delete(ctx, o)
	Eventually(func() bool {
		if err := k.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return true
		}
		if _, ok := o.(*ippoolv1.NodeIPPool); ok && len(o.GetFinalizers()) > 0 {
			o.SetFinalizers(nil)
			_ = k.Update(ctx, o)
		}
		return false
	}).Should(BeTrue())
}

// createPolicy creates a policy for the nodes labelled role whose capture
// addr draws from pool.
func createPolicy(t *testing.T, name, role, pool string) {
	t.Helper()
	createPolicyWith(t, name, role, map[string]string{"addr": "ippool." + pool + ".allocate"}, envtest.OneAddressState)
}

// createPolicyWith creates a policy of nodes with role, with its captures
// and desired state.
func createPolicyWith(t *testing.T, name, role string, captures map[string]string, desired string) *nmstatev1.NodeNetworkConfigurationPolicy {
	t.Helper()
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"role": role}
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
	return p
}

// nodeStateOf returns what a node's NodeNetworkState shows as its current
// state, or why it cannot be read.
func nodeStateOf(node string) string {
	var nns nncev1beta1.NodeNetworkState
	if err := k.Get(ctx, types.NamespacedName{Name: node}, &nns); err != nil {
		return err.Error()
	}
	return string(nns.Status.CurrentState.Raw)
}

// claim creates an enactment that records ips from a pool, as a handler
// would, but belongs to no node: the controllers leave its lifecycle alone.
func claim(t *testing.T, name, poolName string, ips ...string) {
	t.Helper()
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	e.Status.IPPool = ippoolv1.EnactmentIPPools{poolName: {Allocated: ips}}
	Expect(k.Status().Update(ctx, e)).To(Succeed())
}

// available returns "Status Reason: message" of the pool's Available
// condition.
func available(name string) func() string {
	return poolCondition(name, ippoolv1.ConditionAvailable)
}

// poolCondition returns "Status Reason: message" of the pool's condition
// of type t, or "none".
func poolCondition(name, t string) func() string {
	return func() string {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, t)
		if c == nil {
			return "none"
		}
		return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
}

// bits returns the addresses set in a pool's bitmap.
func bits(name string) []string {
	ips, err := envtest.PoolAddresses(ctx, k, name)
	if err != nil {
		return []string{err.Error()}
	}
	return ips
}

// setBits writes a pool's bitmap by hand, as an admin with kubectl would.
func setBits(name string, ips ...string) {
	Eventually(func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		rng, err := poolstatus.Range(&p)
		if err != nil {
			return err
		}
		alloc := ippool.NewAllocator(rng)
		for _, ip := range ips {
			if err := alloc.AllocateIP(mustAddr(ip)); err != nil {
				return err
			}
		}
		poolstatus.Set(&p, alloc)
		return k.Status().Update(ctx, &p)
	}).Should(Succeed())
}

// writeBits sets bits of a pool through the pool writer, as a handler or
// the controller would: the status stays vouched for.
func writeBits(name string, ips ...string) {
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	_, err := w.Update(ctx, name, func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		for _, ip := range ips {
			if err := alloc.AllocateIP(mustAddr(ip)); err != nil && !errors.Is(err, ippool.ErrAllocated) {
				return false, err
			}
		}
		return true, nil
	})
	Expect(err).NotTo(HaveOccurred())
}

// held returns the addresses an enactment records from a pool.
func held(enactment, pool string) []string {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := k.Get(ctx, types.NamespacedName{Name: enactment}, &e); err != nil {
		return []string{err.Error()}
	}
	return e.Status.IPPool[pool].Allocated
}

// enactmentState returns the True condition of an enactment and its
// message.
func enactmentState(name string) func() string {
	return func() string {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &e); err != nil {
			return err.Error()
		}
		for _, c := range e.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return string(c.Type) + ": " + c.Message
			}
		}
		return "no condition"
	}
}

// assertIndexed checks the Unique and Indexed invariants: no address is
// held twice, and the pool's bitmap is exactly the set the enactments
// record plus the addresses in flight or quarantined (so nothing leaked
// either).
func assertIndexed(pool string) {
	Eventually(func(g Gomega) {
		recorded, err := envtest.IndexedAs(ctx, k, pool)
		g.Expect(err).NotTo(HaveOccurred())
		inPool, err := envtest.PoolAddresses(ctx, k, pool)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(inPool).To(Equal(recorded))
	}).Should(Succeed())
}

// events returns "Reason: note" of the Events about an object of kind,
// and auditEvents those of the audit trail.
func events(kind, name string) func() []string { return listed(envtest.Events, kind, name) }

func auditEvents(kind, name string) func() []string { return listed(envtest.AuditEvents, kind, name) }

func listed(list func(context.Context, client.Reader, string, string) ([]string, error), kind, name string) func() []string {
	return func() []string {
		out, err := list(ctx, k, kind, name)
		if err != nil {
			return []string{err.Error()}
		}
		return out
	}
}

// annotate sets the reset annotation on an object, once it exists.
func annotate(o client.Object, value string) {
	Eventually(func() error { return envtest.Annotate(ctx, k, o, ippoolv1.ResetIPPoolAnnotation, value) }).Should(Succeed())
}

// annotated returns whether an object still carries the reset annotation.
func annotated(o client.Object) func() bool {
	return func() bool {
		if err := k.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false
		}
		_, ok := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]
		return ok
	}
}

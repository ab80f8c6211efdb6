package handler_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	cfg    *envtest.Env
	k      client.Client
	simBin string
)

// TestMain runs the suite against a real API server, with the policy
// controller of the control plane granting maxUnavailable slots and
// writing policy status, as in a cluster; the tests play the pool
// controller's part by hand where they need it. No pool controller
// allocates here, so the handlers run in the specification's handler
// allocation (--self-allocate, newNodes); the default, where handlers ask
// the pool controller, is tested with it in controllers/pool and test/e2e.
func TestMain(m *testing.M) {
	var stop func() error
	os.Exit(envtest.Run(runFunc(func() int {
		defer func() { _ = stop() }()
		return m.Run()
	}), func(s *envtest.Suite) {
		cfg, k, simBin = s.Env, s.Client, s.Command("nmstatectl-sim")
		var err error
		if stop, err = cfg.StartPolicyAndEnactmentControllers(); err != nil {
			panic(err)
		}
	}, "nmstatectl-sim"))
}

// runFunc runs the tests and then stops the policy controller, while the
// control plane still runs.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// newNodes creates Nodes prefix01..prefixNN with the given labels; start
// runs their handlers.
func newNodes(t testing.TB, prefix string, n int, labels map[string]string) []*envtest.Node {
	t.Helper()
	dir := t.TempDir()
	nodes := make([]*envtest.Node, n)
	for i := range nodes {
		name := fmt.Sprintf("%s%02d", prefix, i+1)
		Expect(k.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})).To(Succeed())
		nodes[i] = envtest.NewNode(name, dir, simBin)
		nodes[i].SelfAllocate = true
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.Stop()
			_ = k.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.Name}})
		}
	})
	return nodes
}

// start runs the node's handler until the test ends.
func start(t testing.TB, nd *envtest.Node) {
	t.Helper()
	Expect(nd.Start(cfg)).To(Succeed())
}

// newPool creates a pool and, unless available is false, marks it
// Available=True the way the pool controller will after its first rebuild.
func newPool(t testing.TB, name string, r ippoolv1.IPRange, available bool) *ippoolv1.NodeIPPool {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}}
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(context.Background(), p) })
	if available {
		markAvailable(t, name)
	}
	return p
}

func markAvailable(t testing.TB, name string) {
	t.Helper()
	Eventually(func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue,
			Reason: ippoolv1.ReasonReconciledPool, Message: "The pool is up to date"})
		p.Status.Stamp = poolstatus.Stamp(&p) // the controller vouches for what it rebuilt
		return k.Status().Update(context.Background(), &p)
	}).Should(Succeed())
}

func newPolicy(t testing.TB, name string, selector map[string]string, captures map[string]string, desired string) *nmstatev1.NodeNetworkConfigurationPolicy {
	t.Helper()
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = selector
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { deletePolicy(t, name) })
	return p
}

func deletePolicy(t testing.TB, name string) {
	t.Helper()
	_ = k.Delete(context.Background(), &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func getEnactment(node, policy string) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	err := k.Get(context.Background(), shared.EnactmentKey(node, policy), &e)
	return &e, err
}

// enactmentState returns the True condition of the enactment and its
// message, or an error while it does not exist.
func enactmentState(node, policy string) func() (string, error) {
	return func() (string, error) {
		e, err := getEnactment(node, policy)
		if err != nil {
			return "", err
		}
		for _, c := range e.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return string(c.Type) + ": " + c.Message, nil
			}
		}
		return "no condition", nil
	}
}

// held returns the addresses an enactment records from a pool.
func held(node, policy, pool string) []string {
	e, err := getEnactment(node, policy)
	if err != nil {
		return nil
	}
	return e.Status.IPPool[pool].Allocated
}

// poolAddresses returns the addresses set in a pool's bitmap, sorted.
func poolAddresses(name string) ([]string, error) {
	return envtest.PoolAddresses(context.Background(), k, name)
}

// recordedAddresses collects every address any enactment records from a
// pool, sorted, and fails on a duplicate: the Unique invariant.
func recordedAddresses(pool string) ([]string, error) {
	return envtest.RecordedAddresses(context.Background(), k, pool)
}

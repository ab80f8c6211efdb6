package kinds_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// kind is one kind of holder as an admin meets it: what serves it, what
// the admin writes for machines to draw from a pool, and what a machine
// joining, waiting, dying or failing, a reset and a deletion are for it.
type kind struct {
	name string
	// nic says that the kind's addresses go on the NICs of machines that
	// are Nodes of the cluster; a claim's machine is none of ours.
	nic bool
	// serve starts what serves the kind until the test ends: a pool
	// controller as the kind's mode runs it, and what applies policies on
	// the machines.
	serve func(t *testing.T, w *world)
	// hold writes what the admin writes for the machines of w to draw from
	// w.pool. A claim's machine writes its own (join).
	hold func(t *testing.T, w *world)
	// join adds a machine whose holder draws from w.pool.
	join func(t *testing.T, w *world, machine string)
	// waits reports whether machine's holder says it waits for an address
	// of the full pool; nil where no way asks.
	waits func(w *world, machine string) (bool, error)
	// dead adds a machine whose Node is not Ready and on which nothing of
	// the kind's runs (its handler's pod is gone); nil where no machine of
	// the kind's applies anything.
	dead func(t *testing.T, w *world, machine string)
	// reset asks, by annotation, for the address of machine's holder to
	// be replaced.
	reset func(w *world, machine string)
	// pause, where the kind waits for a departing machine to take its
	// addresses off (what runs there confirms it), stops what runs on
	// machine from doing anything until resume. Nil where the kind counts
	// a deleted Node as the evidence (this project's handler takes the
	// addresses off itself on its Node's deletion).
	pause func(w *world, machine string) (resume func())
	// fail makes what runs on machine fail every apply (true), or succeed
	// again.
	fail func(w *world, machine string, failing bool)
	// deletable returns what the admin deletes to give the addresses of w
	// back, and the list of the kind those own (nil for none), whose
	// objects the garbage collector deletes or orphans first.
	deletable func(w *world) ([]client.Object, client.ObjectList)
}

// kinds are the kinds of holder, each as its mode runs it.
var kinds = []*kind{
	{name: "served", nic: true, serve: handlerMode, hold: writePolicy, join: handlerJoins(false), waits: enactmentWaits, dead: handlerDead,
		reset: resetEnactment, fail: failNetwork, deletable: policyOf},
	{name: "self-allocated", nic: true, serve: selfAllocatingMode, hold: writePolicy, join: handlerJoins(true), waits: enactmentWaits, dead: handlerDead,
		reset: resetEnactment, fail: failNetwork, deletable: policyOf},
	{name: "pooled", nic: true, serve: companionMode, hold: writePooledPolicy, join: upstreamJoins, waits: pooledNodeWaits, dead: upstreamDead,
		reset: resetGenerated, pause: stopUpstream, fail: failUpstream, deletable: pooledPolicyOf},
	{name: "claim", serve: claimsServed, hold: func(*testing.T, *world) {}, join: claimJoins, deletable: claimsOf},
}

// startPoolController runs a pool controller, tuned, until the test ends.
func startPoolController(t *testing.T, tune ...func(*envtest.PoolController)) {
	t.Helper()
	pc, err := env.StartPoolController(grace, nil, tune...)
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
}

// handlerMode serves enactments: the pool controller with the policy and
// enactment controllers, and this project's handler on each machine (join).
func handlerMode(t *testing.T, _ *world) { startPoolController(t) }

// selfAllocatingMode is handlerMode as deploy/self-allocate runs it: the
// pool controller holds what nodes carry (--hold-carried-addresses).
func selfAllocatingMode(t *testing.T, _ *world) {
	startPoolController(t, func(pc *envtest.PoolController) { pc.Pools.HoldCarried = true })
}

// writePolicy writes the NNCP of the machines labelled role=<w.name>,
// whose capture addr draws from the pool onto eth1.
func writePolicy(t *testing.T, w *world) {
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name}}
	p.Spec.NodeSelector = map[string]string{"role": w.name}
	p.Spec.Capture = map[string]string{"addr": "ippool." + w.pool + ".allocate"}
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	p.Spec.MaxUnavailable = w.maxUnavailable
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteAndWait(p) })
}

// handlerJoins returns how a machine joins in handler mode: its Node,
// and this project's handler running on it, taking addresses itself when
// selfAllocate says so.
func handlerJoins(selfAllocate bool) func(t *testing.T, w *world, machine string) {
	return func(t *testing.T, w *world, machine string) {
		Expect(k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: machine,
			Labels: map[string]string{"role": w.name, corev1.LabelHostname: machine}}})).To(Succeed())
		nd := envtest.NewNode(machine, w.dir, simBin)
		nd.SelfAllocate = selfAllocate
		Expect(nd.Start(env)).To(Succeed())
		t.Cleanup(func() {
			_ = nd.Stop()
			_ = envtest.RemoveNode(ctx, k, machine)
		})
		w.add(machine, nd)
	}
}

// enactmentWaits reports whether machine's enactment waits for an
// address of the pool (status.waitingForIPPool, with Failing
// IPPoolExhausted).
func enactmentWaits(w *world, machine string) (bool, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := k.Get(ctx, client.ObjectKey{Name: machine + "." + w.name}, &e); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing)
	return e.Status.WaitingForIPPool == w.pool && c != nil && c.Status == corev1.ConditionTrue &&
		string(c.Reason) == ippoolv1.ReasonIPPoolExhausted, nil
}

// handlerDead adds the Node of a machine on which no handler runs, not
// Ready.
func handlerDead(t *testing.T, w *world, machine string) {
	Expect(k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: machine,
		Labels: map[string]string{"role": w.name, corev1.LabelHostname: machine}}})).To(Succeed())
	t.Cleanup(func() { _ = envtest.RemoveNode(ctx, k, machine) })
	notReady(machine)
	w.add(machine, nil)
}

// notReady has the Node's Ready condition say that its kubelet stopped
// posting its status.
func notReady(machine string) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := k.Get(ctx, client.ObjectKey{Name: machine}, &n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			Reason: "NodeStatusUnknown", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return k.Status().Update(ctx, &n)
	})).To(Succeed())
}

// failNetwork has the simulated network of machine refuse every apply,
// as a NetworkManager that does not answer does, or answer again.
func failNetwork(w *world, machine string, failing bool) {
	w.mu.Lock()
	nd := w.machines[machine]
	w.mu.Unlock()
	if failing {
		Expect(os.WriteFile(nd.State+".fail", []byte("apply: NetworkManager is not answering (simulated)\n"), 0o600)).To(Succeed())
		return
	}
	Expect(os.Remove(nd.State + ".fail")).To(Succeed())
}

// resetEnactment annotates the enactment of machine.
func resetEnactment(w *world, machine string) {
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: machine + "." + w.name}}, w.pool)
}

func policyOf(w *world) ([]client.Object, client.ObjectList) {
	return []client.Object{&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name}}}, nil
}

// companionMode serves the nodes of pooled policies: the pool controller
// as it runs beside kubernetes-nmstate's handler (no policy or enactment
// controller), and that handler's double on each machine (join).
func companionMode(t *testing.T, w *world) {
	startPoolController(t, envtest.CompanionMode, func(pc *envtest.PoolController) {
		pc.PooledPolicies.RemovalRetry = time.Second // a failed removal is written again after 1s, 2s, 4s...
	})
	w.upstream = envtest.NewUpstream(t, k, simBin)
	w.upstream.Run()
}

// writePooledPolicy writes the pooled policy of the machines labelled
// role=<w.name>, whose capture addr draws from the pool onto eth1, every
// node at once.
func writePooledPolicy(t *testing.T, w *world) {
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name}}
	p.Spec.NodeSelector = map[string]string{"role": w.name}
	p.Spec.Capture = map[string]string{"addr": "ippool." + w.pool + ".allocate"}
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	all := intstr.FromString("100%")
	p.Spec.MaxUnavailable = &all
	if w.maxUnavailable != nil {
		p.Spec.MaxUnavailable = w.maxUnavailable
	}
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteAndWait(p) })
}

// upstreamJoins adds a machine: its Node, and kubernetes-nmstate's
// handler's double running on it.
func upstreamJoins(_ *testing.T, w *world, machine string) {
	Expect(w.upstream.AddNode(machine, map[string]string{"role": w.name})).To(Succeed())
	w.add(machine, w.upstream.Node(machine))
}

// stopUpstream stops kubernetes-nmstate's handler on machine.
func stopUpstream(w *world, machine string) (resume func()) {
	w.upstream.Down(machine, true)
	return func() { w.upstream.Down(machine, false) }
}

// pooledNodeWaits reports whether the pooled policy says machine waits
// for an address of the pool (Degraded IPPoolExhausted, naming it).
func pooledNodeWaits(w *world, machine string) (bool, error) {
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	if err := k.Get(ctx, client.ObjectKey{Name: w.name}, &p); err != nil {
		return false, err
	}
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionTrue && string(c.Reason) == ippoolv1.ReasonIPPoolExhausted &&
			strings.Contains(c.Message, "no address left for node "+machine) {
			return true, nil
		}
	}
	return false, nil
}

// upstreamDead adds a machine whose Node is not Ready and on which
// kubernetes-nmstate's handler does not run.
func upstreamDead(t *testing.T, w *world, machine string) {
	w.upstream.Down(machine, true)
	upstreamJoins(t, w, machine)
	notReady(machine)
}

// failUpstream has kubernetes-nmstate's handler on machine fail every
// apply, or succeed again.
func failUpstream(w *world, machine string, failing bool) { w.upstream.Fail(machine, failing) }

// resetGenerated annotates the policy generated for machine.
func resetGenerated(w *world, machine string) {
	annotate(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name + "-" + machine}}, w.pool)
}

func pooledPolicyOf(w *world) ([]client.Object, client.ObjectList) {
	return []client.Object{&ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name}}},
		&nmstatev1.NodeNetworkConfigurationPolicyList{}
}

// claimsServed serves Cluster API claims: the pool controller with its
// claim controller, and a namespace for the claims.
func claimsServed(t *testing.T, w *world) {
	startPoolController(t, func(pc *envtest.PoolController) {
		Expect(pc.Claims).NotTo(BeNil(), "the IPAM CRDs are installed: the claim controller must run")
	})
	Expect(k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.name}})).To(Succeed())
}

// claimJoins writes the claim of a machine, as an infrastructure provider
// does: one per machine, named after it.
func claimJoins(t *testing.T, w *world, machine string) {
	c := newClaim(w, machine)
	Expect(k.Create(ctx, c)).To(Succeed())
	t.Cleanup(func() { deleteAndWait(newClaim(w, machine)) })
	w.add(machine, nil)
}

func newClaim(w *world, machine string) client.Object {
	c := capi.NewClaim(version)
	c.SetNamespace(w.name)
	c.SetName(machine)
	c.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": w.pool}}
	return c
}

func claimsOf(w *world) ([]client.Object, client.ObjectList) {
	var out []client.Object
	for _, m := range w.names() {
		out = append(out, newClaim(w, m))
	}
	return out, capi.NewAddressList(version)
}

// annotate sets the reset annotation on o to value.
func annotate(o client.Object, value string) {
	Expect(envtest.Annotate(ctx, k, o, ippoolv1.ResetIPPoolAnnotation, value)).To(Succeed())
}

// deleteAndWait deletes o at the test's end and waits until it is gone,
// playing the garbage collector for it; an object whose controller
// stopped first loses its finalizers by hand after a while.
func deleteAndWait(o client.Object) {
	_ = k.Delete(ctx, o)
	deadline := time.Now().Add(20 * time.Second)
	Eventually(func() bool {
		if gone, err := envtest.Collect(ctx, k, o, nil); gone || err != nil {
			return gone
		}
		if time.Now().After(deadline) {
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := k.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
					return client.IgnoreNotFound(err)
				}
				o.SetFinalizers(nil)
				return k.Update(ctx, o)
			})
		}
		return false
	}, time.Minute).Should(BeTrue())
}

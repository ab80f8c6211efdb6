package handler_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

const timeout = 30 * time.Second

func init() {
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
}

// assertIndexed checks the Unique and Indexed invariants: no address is held
// twice, and the pool's bitmap is exactly the set the enactments record plus
// the addresses in flight or quarantined (no controller runs here to free
// those).
func assertIndexed(pool string) { assertIndexedWithin(pool, timeout) }

// assertIndexedWithin is assertIndexed where a pool controller runs: an
// in-flight entry it forgets (its enactment gone, or moved on without
// recording it) leaves its bit for garbage collection, which frees it once
// it has been unrecorded for the grace period; within says how long that
// may take.
func assertIndexedWithin(pool string, within time.Duration) {
	Eventually(func(g Gomega) {
		recorded, err := envtest.IndexedAs(context.Background(), k, pool)
		g.Expect(err).NotTo(HaveOccurred())
		inPool, err := poolAddresses(pool)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(inPool).To(Equal(recorded))
	}, within).Should(Succeed())
}

func policyCondition(name string, t shared.ConditionType) func() string {
	return func() string {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := p.Status.Conditions.Find(t)
		if c == nil {
			return "missing"
		}
		return string(c.Status) + ": " + c.Message
	}
}

// TestAssign is the specification's "assign static address with IPPool"
// workflow: every selected node gets its own address, applied to eth1.
func TestAssign(t *testing.T) {
	RegisterTestingT(t)
	nodes := newNodes(t, "assign", 3, map[string]string{"role": "assign"})
	newPool(t, "assign-pool", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "10.10.10.1", End: "10.10.10.10", Exclude: []string{"10.10.10.2"}}, true)
	newPolicy(t, "assign", map[string]string{"role": "assign"}, map[string]string{"addr": "ippool.assign-pool.allocate"}, envtest.OneAddressState)
	for _, nd := range nodes {
		start(t, nd)
	}
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name, "assign")).Should(HavePrefix("Available"))
	}
	assertIndexed("assign-pool")
	Expect(recordedAddresses("assign-pool")).To(Equal([]string{"10.10.10.1", "10.10.10.3", "10.10.10.4"}))
	for _, nd := range nodes {
		Expect(nd.Configured("eth1")).To(Equal(held(nd.Name, "assign", "assign-pool")[0] + "/24"))
		e, err := getEnactment(nd.Name, "assign")
		Expect(err).NotTo(HaveOccurred())
		Expect(e.Labels).To(HaveKeyWithValue(shared.EnactmentNodeLabel, nd.Name))
		Expect(e.Finalizers).To(ContainElement(ippoolv1.FinalizerIPPool))
		Expect(e.Status.CapturedStates).To(HaveKey("addr"))
	}
	Eventually(policyCondition("assign", shared.NodeNetworkConfigurationPolicyConditionAvailable)).Should(Equal("True: 3/3 nodes successfully configured"))
}

// TestExhausted is the specification's "exhausted range" variation: the
// node that finds no address fails with an explicit message.
func TestExhausted(t *testing.T) {
	RegisterTestingT(t)
	nodes := newNodes(t, "exhaust", 3, map[string]string{"role": "exhaust"})
	newPool(t, "small", ippoolv1.IPRange{CIDR: "10.20.0.0/24", Start: "10.20.0.1", End: "10.20.0.2"}, true)
	newPolicy(t, "exhaust", map[string]string{"role": "exhaust"}, map[string]string{"addr": "ippool.small.allocate"}, envtest.OneAddressState)
	for _, nd := range nodes {
		start(t, nd)
	}
	Eventually(func() []string {
		var states []string
		for _, nd := range nodes {
			s, _ := enactmentState(nd.Name, "exhaust")()
			states = append(states, strings.SplitN(s, ":", 2)[0])
		}
		return states
	}).Should(ConsistOf("Available", "Available", "Failing"))
	for _, nd := range nodes {
		if s, _ := enactmentState(nd.Name, "exhaust")(); strings.HasPrefix(s, "Failing") {
			Expect(s).To(ContainSubstring(`NodeIPPool "small" is exhausted: all 2 addresses are allocated and 1 more are needed; grow its range in place`))
			Expect(held(nd.Name, "exhaust", "small")).To(BeEmpty())
		}
	}
	assertIndexed("small")
	Eventually(policyCondition("exhaust", shared.NodeNetworkConfigurationPolicyConditionDegraded)).Should(Equal("True: 1/3 nodes failed to configure"))
}

// TestSticky restarts a node's handler: the new one finds the address in
// the enactment and does nothing at all: no pool or enactment write, no
// apply, no read from the API server but one list of the pools, with which
// its state reporter settles the network before its first publication (no
// address was released from this node, so it reads no more). A change of
// the policy then shows it was running all along, and it keeps the
// address.
func TestSticky(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "sticky", 1, map[string]string{"role": "sticky"})[0]
	newPool(t, "sticky-pool", ippoolv1.IPRange{CIDR: "10.40.0.0/24"}, true)
	p := newPolicy(t, "sticky", map[string]string{"role": "sticky"}, map[string]string{"addr": "ippool.sticky-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "sticky")).Should(HavePrefix("Available"))
	address := held(nd.Name, "sticky", "sticky-pool")
	var before ippoolv1.NodeIPPool
	Expect(k.Get(context.Background(), types.NamespacedName{Name: "sticky-pool"}, &before)).To(Succeed())
	enactment, err := getEnactment(nd.Name, "sticky")
	Expect(err).NotTo(HaveOccurred())

	Expect(nd.Stop()).To(Succeed())
	nd.Network.Shows.Store(0)
	nd.Network.Applies.Store(0)
	var reads, poolLists atomic.Int32
	nd.Tune = func(r *handler.Reconciler) {
		r.APIReader = countingReader{Reader: r.APIReader, n: &reads, poolLists: &poolLists}
	}
	start(t, nd)
	Consistently(func(g Gomega) {
		var after ippoolv1.NodeIPPool
		g.Expect(k.Get(context.Background(), types.NamespacedName{Name: "sticky-pool"}, &after)).To(Succeed())
		g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the pool was written")
		e, err := getEnactment(nd.Name, "sticky")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(e.ResourceVersion).To(Equal(enactment.ResourceVersion), "the enactment was written")
		g.Expect(nd.Network.Shows.Load()).To(BeZero(), "the state was read")
		g.Expect(nd.Network.Applies.Load()).To(BeZero(), "the state was applied again")
		g.Expect(reads.Load()).To(BeZero(), "the API server was read")
		g.Expect(poolLists.Load()).To(BeNumerically("<=", 1), "the pools were listed more than once")
	}, 2*time.Second).Should(Succeed())
	Expect(poolLists.Load()).To(BeEquivalentTo(1), "the reporter settled the network once")

	Expect(k.Get(context.Background(), client.ObjectKeyFromObject(p), p)).To(Succeed())
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState + "  mtu: 1400\n")
	Expect(k.Update(context.Background(), p)).To(Succeed())
	Eventually(nd.Network.Applies.Load).Should(BeNumerically(">", 0))
	Eventually(enactmentState(nd.Name, "sticky")).Should(HavePrefix("Available"))
	Expect(held(nd.Name, "sticky", "sticky-pool")).To(Equal(address))
}

// countingReader counts the reads a handler makes from the API server:
// lists of pools apart.
type countingReader struct {
	client.Reader
	n, poolLists *atomic.Int32
}

func (c countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*ippoolv1.NodeIPPoolList); ok && c.poolLists != nil {
		c.poolLists.Add(1)
		return c.Reader.List(ctx, list, opts...)
	}
	c.n.Add(1)
	return c.Reader.List(ctx, list, opts...)
}

// TestApplyFailure makes nmstatectl fail: the enactment retries with
// backoff (Failing / Retrying "Retrying n/m"), keeps its address, and
// succeeds once nmstatectl does.
func TestApplyFailure(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "applyfail", 1, map[string]string{"role": "applyfail"})[0]
	Expect(os.WriteFile(nd.State+".fail", []byte("apply: eth1: no such device (simulated)\n"), 0o600)).To(Succeed())
	nd.Tune = func(r *handler.Reconciler) { r.Retry.Duration, r.Retry.Cap = time.Second, 10*time.Second }
	newPool(t, "applyfail-pool", ippoolv1.IPRange{CIDR: "10.50.0.0/24"}, true)
	newPolicy(t, "applyfail", map[string]string{"role": "applyfail"}, map[string]string{"addr": "ippool.applyfail-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "applyfail")).Should(And(HavePrefix("Failing: Retrying 2/5 in 2s: "),
		ContainSubstring("eth1: no such device (simulated)")))
	address := held(nd.Name, "applyfail", "applyfail-pool")
	Expect(address).To(Equal([]string{"10.50.0.1"}))
	assertIndexed("applyfail-pool")
	Expect(nd.Configured("eth1")).To(BeEmpty())

	Expect(os.Remove(nd.State + ".fail")).To(Succeed())
	Eventually(enactmentState(nd.Name, "applyfail")).Should(HavePrefix("Available"))
	Expect(held(nd.Name, "applyfail", "applyfail-pool")).To(Equal(address))
	Expect(nd.Configured("eth1")).To(Equal("10.50.0.1/24"))
	e, err := getEnactment(nd.Name, "applyfail")
	Expect(err).NotTo(HaveOccurred())
	Expect(e.Status.Failures).To(BeNil(), "success clears the count")
}

// TestRetriesSpent: an apply that keeps failing is tried 1 + 5 times with
// growing delays, not in a loop; then the enactment is Failing /
// FailedToConfigure with a Warning Event and stays so, across a handler
// restart, until the policy changes.
func TestRetriesSpent(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "retries", 1, map[string]string{"role": "retries"})[0]
	Expect(os.WriteFile(nd.State+".fail", []byte("apply: eth1: no such device (simulated)\n"), 0o600)).To(Succeed())
	newPool(t, "retries-pool", ippoolv1.IPRange{CIDR: "10.51.0.0/24"}, true)
	p := newPolicy(t, "retries", map[string]string{"role": "retries"}, map[string]string{"addr": "ippool.retries-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "retries")).Should(And(HavePrefix("Failing: "),
		HaveSuffix("eth1: no such device (simulated) (gave up after 6 attempts; change the policy to try again)")))
	e, err := getEnactment(nd.Name, "retries")
	Expect(err).NotTo(HaveOccurred())
	Expect(e.Status.Failures.Count).To(Equal(int32(6)))
	Expect(e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing).Reason).To(
		Equal(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure))
	Expect(nd.Network.Applies.Load()).To(Equal(int32(6)))
	// One Warning Event per failed attempt, each saying what comes next.
	Eventually(enactmentEvents(nd.Name, "retries")).Should(ConsistOf(
		HavePrefix("Retrying: Retrying 1/5 in 100ms: "), HavePrefix("Retrying: Retrying 2/5 in 200ms: "),
		HavePrefix("Retrying: Retrying 3/5 in 400ms: "), HavePrefix("Retrying: Retrying 4/5 in 800ms: "),
		HavePrefix("Retrying: Retrying 5/5 in 1s: "), HavePrefix("FailedToConfigure: ")))
	// And one on the policy, in kubernetes-nmstate's words.
	policyEvents := func() ([]string, error) {
		return envtest.Events(context.Background(), k, "NodeNetworkConfigurationPolicy", "retries")
	}
	Eventually(policyEvents).Should(ConsistOf(
		fmt.Sprintf(`ReconcileFailed: reconciliation of enactment "%s.retries" has failed after 5 retries`, nd.Name)))

	// No hot loop, and a restarted handler goes on from the count.
	Expect(nd.Stop()).To(Succeed())
	start(t, nd)
	Consistently(nd.Network.Applies.Load, 2*time.Second).Should(Equal(int32(6)))
	Expect(policyEvents()).To(HaveLen(1), "the give-up is told once")

	Expect(os.Remove(nd.State + ".fail")).To(Succeed())
	failedAt := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing).LastTransitionTime
	bumpPolicy(p.Name)
	Eventually(enactmentState(nd.Name, "retries")).Should(HavePrefix("Available"))
	e, err = getEnactment(nd.Name, "retries")
	Expect(err).NotTo(HaveOccurred())
	Expect(e.Status.Failures).To(BeNil())
	Expect(e.Status.PolicyGeneration).To(Equal(int64(2)))
	// The new generation's conditions start afresh: even the types that
	// stayed False have moved on from the old generation's times.
	aborted := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionAborted)
	Expect(aborted.LastTransitionTime.After(failedAt.Time)).To(BeTrue(), "Aborted changed at %s, the old generation failed at %s",
		aborted.LastTransitionTime, failedAt)
}

// TestCaptureImmutableAndNodeUnselected: the API server refuses to drop a
// capture of a policy (its addresses are recorded per capture), and
// nothing changes; a node that stops matching gives everything back.
func TestCaptureImmutableAndNodeUnselected(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "update", 1, map[string]string{"role": "update"})[0]
	newPool(t, "update-pool", ippoolv1.IPRange{CIDR: "10.80.0.0/24"}, true)
	two := `interfaces:
- name: eth1
  ipv4:
    address:
    - ip: "{{ capture.a.ip }}"
      prefix-length: "{{ capture.a.prefix-length }}"
- name: eth2
  ipv4:
    address:
    - ip: "{{ capture.b.ip }}"
      prefix-length: "{{ capture.b.prefix-length }}"
`
	policy := newPolicy(t, "update", map[string]string{"role": "update"},
		map[string]string{"a": "ippool.update-pool.allocate", "b": "ippool.update-pool.allocate"}, two)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "update")).Should(HavePrefix("Available"))
	Expect(held(nd.Name, "update", "update-pool")).To(Equal([]string{"10.80.0.1", "10.80.0.2"}))

	// The policy controller writes the policy's status meanwhile.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(context.Background(), types.NamespacedName{Name: "update"}, policy); err != nil {
			return err
		}
		policy.Spec.Capture = map[string]string{"a": "ippool.update-pool.allocate"}
		policy.Spec.DesiredState = shared.NewState(strings.Split(two, "- name: eth2")[0])
		return k.Update(context.Background(), policy)
	})
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "dropping a capture: %v", err)
	Expect(err.Error()).To(ContainSubstring("spec.capture is immutable: delete the policy and create it again"))
	Consistently(func() []string { return held(nd.Name, "update", "update-pool") }, time.Second).
		Should(Equal([]string{"10.80.0.1", "10.80.0.2"}))

	var n corev1.Node
	Expect(k.Get(context.Background(), types.NamespacedName{Name: nd.Name}, &n)).To(Succeed())
	n.Labels = map[string]string{"role": "elsewhere"}
	Expect(k.Update(context.Background(), &n)).To(Succeed())
	Eventually(func() bool { _, err := getEnactment(nd.Name, "update"); return apierrors.IsNotFound(err) }).Should(BeTrue())
	Eventually(func() ([]string, error) { return envtest.EntryAddresses(context.Background(), k, "update-pool") }).
		Should(ContainElement("10.80.0.1"))
	Eventually(policyCondition("update", shared.ConditionType(ippoolv1.PolicyConditionIgnored))).Should(Equal("True: Policy does not match any node"))
}

// TestNodeDeletedBehindAStaleCache: a handler whose cache still shows its
// Node after the Node was deleted does not create an enactment for it,
// and so takes no address: the Node is read from the API server before an
// enactment is created.
func TestNodeDeletedBehindAStaleCache(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "stale", 1, map[string]string{"role": "stale"})[0]
	newPool(t, "stale-pool", ippoolv1.IPRange{CIDR: "10.81.0.0/24"}, true)
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	Expect(k.Get(context.Background(), types.NamespacedName{Name: nd.Name}, node)).To(Succeed())
	Expect(k.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.Name}})).To(Succeed())
	nd.Tune = func(r *handler.Reconciler) { r.Client = staleNode{Client: r.Client, node: node} }
	start(t, nd)
	newPolicy(t, "stale", map[string]string{"role": "stale"}, map[string]string{"addr": "ippool.stale-pool.allocate"}, envtest.OneAddressState)
	Consistently(func() bool { _, err := getEnactment(nd.Name, "stale"); return apierrors.IsNotFound(err) }, 3*time.Second).
		Should(BeTrue(), "an enactment for a deleted Node")
	Expect(envtest.EntryAddresses(context.Background(), k, "stale-pool")).To(BeEmpty())
}

// staleNode is a cache that still shows a Node the API server no longer
// has.
type staleNode struct {
	client.Client
	node *metav1.PartialObjectMetadata
}

func (s staleNode) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Kind == "Node" && key.Name == s.node.Name {
		s.node.DeepCopyInto(m)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// TestAbortedAtMaxUnavailable: once as many nodes as maxUnavailable gave
// up on a policy, the other nodes do not apply it: Aborted /
// ConfigurationAborted, and the policy is Degraded. A fixed policy rolls
// out again.
func TestAbortedAtMaxUnavailable(t *testing.T) {
	RegisterTestingT(t)
	nodes := newNodes(t, "abort", 3, map[string]string{"role": "abort"})
	for _, nd := range nodes {
		Expect(os.WriteFile(nd.State+".fail", []byte("apply: eth1: no such device (simulated)\n"), 0o600)).To(Succeed())
		nd.Tune = func(r *handler.Reconciler) { r.Retry.Steps = 0 }
	}
	newPool(t, "abort-pool", ippoolv1.IPRange{CIDR: "10.52.0.0/24"}, true)
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "abort"}}
	p.Spec.NodeSelector = map[string]string{"role": "abort"}
	p.Spec.Capture = map[string]string{"addr": "ippool.abort-pool.allocate"}
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	one := intstr.FromInt32(1)
	p.Spec.MaxUnavailable = &one
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { deletePolicy(t, p.Name) })
	for _, nd := range nodes {
		start(t, nd)
	}
	states := func() []string {
		var out []string
		for _, nd := range nodes {
			e, err := getEnactment(nd.Name, "abort")
			if err != nil {
				return []string{err.Error()}
			}
			for _, c := range e.Status.Conditions {
				if c.Status == corev1.ConditionTrue {
					out = append(out, string(c.Type)+"/"+string(c.Reason))
				}
			}
		}
		return out
	}
	Eventually(states).Should(ConsistOf("Failing/FailedToConfigure", "Aborted/ConfigurationAborted", "Aborted/ConfigurationAborted"))
	Eventually(policyCondition("abort", shared.NodeNetworkConfigurationPolicyConditionDegraded)).Should(
		Equal("True: 1/3 nodes failed to configure, 2 aborted"))
	// The policy tells of the give-up and of each abort, in
	// kubernetes-nmstate's words.
	Eventually(func() ([]string, error) {
		return envtest.Events(context.Background(), k, "NodeNetworkConfigurationPolicy", "abort")
	}).Should(ConsistOf(HaveSuffix("has failed after 0 retries"), HaveSuffix("has aborted"), HaveSuffix("has aborted")))
	Consistently(func() int32 {
		var applies int32
		for _, nd := range nodes {
			applies += nd.Network.Applies.Load()
		}
		return applies
	}, 2*time.Second).Should(Equal(int32(1)), "only the node that failed applied")
	for _, nd := range nodes {
		if s, _ := enactmentState(nd.Name, "abort")(); strings.HasPrefix(s, "Aborted") {
			Expect(s).To(Equal("Aborted: Configuration aborted: policy generation 1 failed on 1 node, " +
				"which reaches its maxUnavailable (1); fix the policy to roll it out again"))
		}
		Expect(os.Remove(nd.State + ".fail")).To(Succeed())
	}
	bumpPolicy(p.Name)
	Eventually(states).Should(ConsistOf("Available/SuccessfullyConfigured", "Available/SuccessfullyConfigured", "Available/SuccessfullyConfigured"))
	Eventually(policyCondition("abort", shared.NodeNetworkConfigurationPolicyConditionAvailable)).Should(Equal("True: 3/3 nodes successfully configured"))
}

package companion_test

import (
	"context"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// countingReader counts the reads through it, by what was read (readOf).
type countingReader struct {
	client.Reader
	mu   sync.Mutex
	gets map[string]int
}

// readOf names a read by the type read into, and the kind of a metadata
// read.
func readOf(o client.Object) string {
	if m, ok := o.(*metav1.PartialObjectMetadata); ok {
		return "metadata of " + m.Kind
	}
	return reflect.TypeOf(o).String()
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	c.gets[readOf(obj)]++
	c.mu.Unlock()
	return c.Reader.Get(ctx, key, obj, opts...)
}

// count returns how many reads of o (readOf) were made.
func (c *countingReader) count(o client.Object) func() int {
	return func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.gets[readOf(o)]
	}
}

// metadataOf is a metadata object of kind, as counted (readOf).
func metadataOf(kind string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: kind}}
}

// TestGeneratedPoliciesAreReadOnlyWhenChanged: the pool controller keeps
// the generated policies as metadata, and knows the spec of each from its
// own write: passes over a rolled-out policy read none of them from the
// API server. A generated policy someone else edits is read once, at its
// new generation, and written back.
func TestGeneratedPoliciesAreReadOnlyWhenChanged(t *testing.T) {
	reads := &countingReader{gets: map[string]int{}}
	rolledOut(t, func(pc *envtest.PoolController) {
		reads.Reader = pc.PooledPolicies.APIReader
		pc.PooledPolicies.APIReader = reads
	}, "rd", "10.82.0.0/24", "10.82.0.10", "10.82.0.30", "rd-1", "rd-2", "rd-3")
	whole := reads.count(&nmstatev1.NodeNetworkConfigurationPolicy{})
	passes := reads.count(metadataOf(holder.PooledPolicyKind)) // each pass reads it first (cacheBehind)
	before := whole()

	// Three passes over three Available nodes (the fourth starts once
	// the third is done: passes of one policy run one at a time): no
	// policy read.
	for i := range 4 {
		started := passes()
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p ippoolv1.PooledNodeNetworkConfigurationPolicy
			if err := k.Get(ctx, types.NamespacedName{Name: "rd"}, &p); err != nil {
				return err
			}
			p.Labels = map[string]string{"touched": strconv.Itoa(i)}
			return k.Update(ctx, &p)
		})).To(Succeed())
		Eventually(passes).Should(BeNumerically(">", started))
	}
	Expect(whole()).To(Equal(before), "a pass over Available nodes read their generated policies from the API server")

	// An edit by someone else: read at its new generation, written back.
	name := types.NamespacedName{Name: ippoolv1.NodePolicyName("rd", "rd-2")}
	var g nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, name, &g)).To(Succeed())
	want := string(g.Spec.DesiredState.Raw)
	edited := g.Generation + 1
	g.Spec.DesiredState = shared.NewState("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  mtu: 1400\n")
	Expect(k.Update(ctx, &g)).To(Succeed())
	Expect(g.Generation).To(Equal(edited))
	Eventually(func(gm Gomega) {
		var now nmstatev1.NodeNetworkConfigurationPolicy
		gm.Expect(k.Get(ctx, name, &now)).To(Succeed())
		gm.Expect(now.Generation).To(BeNumerically(">", edited))
		gm.Expect(string(now.Spec.DesiredState.Raw)).To(Equal(want))
	}).Should(Succeed())
	Expect(whole()).To(BeNumerically(">", before), "the edited policy was written back without being read")
	Eventually(status("rd")).Should(HavePrefix("Available"))
}

// TestNodeWithoutHandlerIsNotCounted: kubernetes-nmstate's handlers say a
// generated policy matches no node they run on (NoMatchingNode) when its
// node runs none; that node has no enactment, and the pooled policy counts
// it not at all, as kubernetes-nmstate counts such a node, instead of
// waiting for it forever. The status is read from the API server: the
// controller's cache holds the generated policies' metadata only.
func TestNodeWithoutHandlerIsNotCounted(t *testing.T) {
	u := begin(t, "nh", "nh-1", "nh-2")
	u.Down("nh-2", true)
	createPool(t, "cmp-nh", rangeSpec("10.83.0.0/24", "10.83.0.10", "10.83.0.30"))
	create(t, pooled("nh", "nh", "cmp-nh", "100%"))
	Eventually(generated("nh")).Should(ConsistOf("nh-nh-1", "nh-nh-2"))
	Eventually(status("nh")).Should(HavePrefix("Progressing"))

	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var g nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(ctx, types.NamespacedName{Name: "nh-nh-2"}, &g); err != nil {
			return err
		}
		now := metav1.Now()
		g.Status.Conditions = shared.ConditionList{{Type: shared.ConditionType(ippoolv1.PolicyConditionIgnored), Status: corev1.ConditionTrue,
			Reason: shared.NodeNetworkConfigurationPolicyConditionConfigurationNoMatchingNode, Message: "Policy does not match any node",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		return k.Status().Update(ctx, &g)
	})).To(Succeed())
	Eventually(status("nh"), time.Minute).Should(And(HavePrefix("Available"), ContainSubstring("1/1 nodes")))
}

// TestAskingEnactmentIsNotServed: beside kubernetes-nmstate's handler no
// enactment is the pool controller's to serve, and kubernetes-nmstate's
// are never written. One that asks for an address as this project's
// handler would (its request annotation, its policy capturing from the
// pool), and says it waits for the pool (left from handler mode), gets
// none, keeps its status and is not nudged, while the pool serves a
// pooled policy's nodes; its policy is not read whole from the cache
// either (the suite's cleanup says so).
func TestAskingEnactmentIsNotServed(t *testing.T) {
	u := rolledOut(t, asIs, "ask", "10.84.0.0/24", "10.84.0.10", "10.84.0.30", "ask-1")
	plain := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ask-plain"}}
	plain.Spec.NodeSelector = map[string]string{"role": "ask-nothing"}
	plain.Spec.Capture = map[string]string{"addr": "ippool.cmp-ask.allocate"}
	plain.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	Expect(k.Create(ctx, plain)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, plain) })
	key := shared.EnactmentKey("ask-ghost", plain.Name)
	asking := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: key.Name,
		Labels:      map[string]string{shared.EnactmentPolicyLabel: plain.Name, shared.EnactmentNodeLabel: "ask-ghost"},
		Annotations: map[string]string{ippoolv1.RequestAnnotation: "cmp-ask"}}}
	Expect(k.Create(ctx, asking)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, asking) })
	asking.Status.WaitingForIPPool = "cmp-ask"
	asking.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationEnactmentConditionPending,
		Status: corev1.ConditionTrue, Reason: ippoolv1.ReasonIPPoolNotAvailable, LastTransitionTime: metav1.Now()}}
	Expect(k.Status().Update(ctx, asking)).To(Succeed())
	waits := asking.Status.DeepCopy()

	// The pool serves after the ask: a node joins the pooled policy.
	Expect(u.AddNode("ask-2", map[string]string{"role": "ask"})).To(Succeed())
	Eventually(recorded("ask")).Should(HaveLen(2))
	Eventually(status("ask")).Should(And(HavePrefix("Available"), ContainSubstring("2/2 nodes")))
	Consistently(func(gm Gomega) {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		gm.Expect(k.Get(ctx, key, &e)).To(Succeed())
		gm.Expect(e.Status).To(Equal(*waits))
		gm.Expect(e.Annotations).NotTo(HaveKey(ippoolv1.NudgeAnnotation))
	}, 2*time.Second).Should(Succeed())
	Expect(bits("cmp-ask")()).To(HaveLen(2), "the pool holds an address for the enactment that asked")
}

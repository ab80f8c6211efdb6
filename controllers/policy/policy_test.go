package policy_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/policy"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	cfg *envtest.Env
	k   client.Client
	ctx = context.Background()
)

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, func(s *envtest.Suite) { cfg, k = s.Env, s.Client }))
}

// startController runs the policy controller with a slot timeout.
func startController(t *testing.T, slotTimeout time.Duration) {
	t.Helper()
	mgr, err := cfg.NewManager()
	Expect(err).NotTo(HaveOccurred())
	r := policy.New(mgr)
	r.Batch, r.SlotTimeout = 50*time.Millisecond, slotTimeout
	Expect(r.SetupWithManager(ctx, mgr, policy.SetupOptions{SkipNameValidation: true})).To(Succeed())
	stop := envtest.RunManager(mgr)
	t.Cleanup(func() { _ = stop() })
}

// setUp creates n labelled Nodes, a policy selecting them with
// maxUnavailable, and one enactment per node, as handlers would.
func setUp(t *testing.T, role string, n int, maxUnavailable intstr.IntOrString) []string {
	t.Helper()
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: role}}
	p.Spec.NodeSelector = map[string]string{"role": role}
	p.Spec.MaxUnavailable = &maxUnavailable
	p.Spec.DesiredState = shared.NewState("interfaces: []\n")
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
	var names []string
	for i := range n {
		node := fmt.Sprintf("%s%02d", role, i+1)
		Expect(k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"role": role}}})).To(Succeed())
		t.Cleanup(func() { _ = k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
			Name:   shared.EnactmentKey(node, role).Name,
			Labels: map[string]string{shared.EnactmentPolicyLabel: role, shared.EnactmentNodeLabel: node},
		}}
		Expect(k.Create(ctx, e)).To(Succeed())
		t.Cleanup(func() { _ = k.Delete(ctx, e) })
		names = append(names, e.Name)
	}
	return names
}

// handlerWrites sets an enactment's status as its handler would: at
// generation 1, with condition c True, and a slot request when asked.
func handlerWrites(name string, c shared.ConditionType, request bool) {
	handlerWritesAt(name, 1, c, request)
}

// handlerWritesAt is handlerWrites at the policy's generation given.
func handlerWritesAt(name string, generation int64, c shared.ConditionType, request bool) {
	Eventually(func() error {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &e); err != nil {
			return err
		}
		e.Status.PolicyGeneration = generation
		e.Status.Conditions = conditions.OneTrue(e.Status.Conditions, shared.NodeNetworkConfigurationEnactmentConditionTypes[:], c, "", "", time.Now())
		e.Status.Slot = nil
		if request {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(time.Now())}
		}
		return k.Status().Update(ctx, &e)
	}).Should(Succeed())
}

// slots returns the enactments whose slot is granted and those queued for
// want of one. The controller writes only the slot: every enactment still
// shows the condition its handler wrote.
func slots(names []string) (granted, pending []string) {
	for _, name := range names {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if k.Get(ctx, types.NamespacedName{Name: name}, &e) != nil {
			continue
		}
		if slot := e.Status.Slot; slot != nil && slot.Granted != nil {
			granted = append(granted, name)
		}
		if slot := e.Status.Slot; slot != nil && slot.Queued != nil && slot.Granted == nil {
			pending = append(pending, name)
		}
		for _, c := range e.Status.Conditions {
			// handlerWrites writes neither reasons nor messages.
			Expect(c.Reason).To(BeEmpty(), "%s: a condition its handler did not write: %+v", name, c)
			Expect(c.Message).To(BeEmpty(), "%s: a condition its handler did not write: %+v", name, c)
		}
	}
	return granted, pending
}

// versions returns the resourceVersions of the enactments.
func versions(names []string) []string {
	var out []string
	for _, name := range names {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		Expect(k.Get(ctx, types.NamespacedName{Name: name}, &e)).To(Succeed())
		out = append(out, e.ResourceVersion)
	}
	return out
}

// policyState returns the True condition of the policy and its message.
func policyState(name string) func() string {
	return func() string {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return fmt.Sprintf("%s: %s", c.Type, c.Message)
			}
		}
		return "no condition"
	}
}

// TestMaxUnavailable: with maxUnavailable 1, three requests are granted
// one at a time, the others queued, in order, and the policy's
// status follows the enactments to Available.
func TestMaxUnavailable(t *testing.T) {
	RegisterTestingT(t)
	startController(t, time.Hour)
	names := setUp(t, "one", 3, intstr.FromInt32(1))
	// The controller may have written "0/2" while the third node was
	// being created: a count-only change waits up to ProgressEvery.
	Eventually(policyState("one"), policy.ProgressEvery+5*time.Second).Should(Equal("Progressing: Policy is progressing 0/3 nodes finished"))
	for _, name := range names {
		handlerWrites(name, shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	}
	for done := range names {
		var granted []string
		Eventually(func() int {
			var pending []string
			granted, pending = slots(names)
			return len(granted) + 100*len(pending)
		}).Should(Equal(1+100*(len(names)-done-1)), "one slot granted, the other requests queued")
		Consistently(func() int { g, _ := slots(names); return len(g) }, 500*time.Millisecond).Should(Equal(1))
		before := versions(names)
		Consistently(func() []string { return versions(names) }, 500*time.Millisecond).Should(Equal(before),
			"a request is queued once, and nothing else is written while it waits")
		handlerWrites(granted[0], shared.NodeNetworkConfigurationEnactmentConditionAvailable, false)
	}
	Eventually(policyState("one")).Should(Equal("Available: 3/3 nodes successfully configured"))
	var p nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, types.NamespacedName{Name: "one"}, &p)).To(Succeed())
	Expect(p.Status.UnavailableNodeCount).To(BeZero())
}

// TestFailingAndScaleDown: a failing node degrades the policy; once that
// node is removed the status counts the remaining nodes only
// (kubernetes-nmstate #1098 keeps counting it).
func TestFailingAndScaleDown(t *testing.T) {
	RegisterTestingT(t)
	startController(t, time.Hour)
	names := setUp(t, "down", 3, intstr.FromString("50%"))
	handlerWrites(names[0], shared.NodeNetworkConfigurationEnactmentConditionAvailable, false)
	handlerWrites(names[1], shared.NodeNetworkConfigurationEnactmentConditionAvailable, false)
	handlerWrites(names[2], shared.NodeNetworkConfigurationEnactmentConditionFailing, false)
	Eventually(policyState("down")).Should(Equal("Degraded: 1/3 nodes failed to configure"))
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down03"}})).To(Succeed())
	Eventually(policyState("down")).Should(Equal("Available: 2/2 nodes successfully configured"))
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down01"}})).To(Succeed())
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down02"}})).To(Succeed())
	Eventually(policyState("down")).Should(Equal("Ignored: Policy does not match any node"))
}

// TestSlotTimeout: a grant whose handler never reports back stops counting
// after the slot timeout, and the next request is granted.
func TestSlotTimeout(t *testing.T) {
	RegisterTestingT(t)
	startController(t, 2*time.Second)
	names := setUp(t, "dead", 2, intstr.FromInt32(1))
	handlerWrites(names[0], shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Eventually(func() []string { g, _ := slots(names); return g }).Should(Equal(names[:1]))
	handlerWrites(names[1], shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Eventually(func() []string { _, p := slots(names); return p }).Should(Equal(names[1:]))
	Consistently(func() []string { g, _ := slots(names); return g }, time.Second).Should(Equal(names[:1]))
	Eventually(func() []string { g, _ := slots(names); return g }, 10*time.Second).Should(Equal(names))
}

// TestGrantNamesGeneration: a grant names the policy's generation it was
// given for, and a request written for another generation than the
// policy's (its handler's cache behind) is neither granted nor queued
// until its handler writes it for the policy as it is.
func TestGrantNamesGeneration(t *testing.T) {
	RegisterTestingT(t)
	startController(t, time.Hour)
	names := setUp(t, "gen", 2, intstr.FromInt32(2))
	handlerWrites(names[0], shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Eventually(func() []string { g, _ := slots(names); return g }).Should(Equal(names[:1]))
	Expect(slotOf(names[0]).PolicyGeneration).To(BeEquivalentTo(1))

	var p nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, types.NamespacedName{Name: "gen"}, &p)).To(Succeed())
	before := p.DeepCopy()
	p.Spec.DesiredState = shared.NewState("interfaces: [{name: eth1, type: ethernet, state: up}]\n")
	Expect(k.Patch(ctx, &p, client.MergeFrom(before))).To(Succeed())
	Expect(p.Generation).To(BeEquivalentTo(2))

	// A slot is free, and the request is for generation 1.
	handlerWrites(names[1], shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Consistently(func() *nncev1beta1.ApplySlot { return slotOf(names[1]) }, time.Second).
		Should(HaveField("Granted", BeNil()), "a request for generation 1 is not granted at generation 2")
	Expect(slotOf(names[1]).Queued).To(BeNil(), "nor queued")
	handlerWritesAt(names[1], 2, shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Eventually(func() int64 {
		if s := slotOf(names[1]); s.Granted != nil {
			return s.PolicyGeneration
		}
		return 0
	}).Should(BeEquivalentTo(2))
}

// TestEnactmentOfAnEarlierPolicy: an enactment created for an earlier
// policy of the same name (its nmstate.io/policy-uid another UID), left
// until its handler ends it, is neither granted a slot of this policy nor
// counted as holding one.
func TestEnactmentOfAnEarlierPolicy(t *testing.T) {
	RegisterTestingT(t)
	startController(t, time.Hour)
	names := setUp(t, "reborn", 2, intstr.FromInt32(1))
	Eventually(func() error {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: names[0]}, &e); err != nil {
			return err
		}
		e.Annotations = map[string]string{ippoolv1.PolicyUIDAnnotation: "the-earlier-policys-uid"}
		return k.Update(ctx, &e)
	}).Should(Succeed())
	handlerWrites(names[0], shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Consistently(func() *nncev1beta1.ApplySlot { return slotOf(names[0]) }, time.Second).
		Should(HaveField("Granted", BeNil()), "the earlier policy's enactment is granted a slot of this one")

	// Granted by the earlier policy and applying it, it holds none of
	// this policy's one slot.
	Eventually(func() error {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: names[0]}, &e); err != nil {
			return err
		}
		e.Status.Slot.Granted = ptr.To(metav1.NewMicroTime(time.Now()))
		return k.Status().Update(ctx, &e)
	}).Should(Succeed())
	handlerWrites(names[1], shared.NodeNetworkConfigurationEnactmentConditionProgressing, true)
	Eventually(func() []string { g, _ := slots(names[1:]); return g }).Should(Equal(names[1:]),
		"this policy's enactment waits on a slot the earlier policy's enactment holds")
}

// slotOf returns the enactment's status.slot (an empty one if none).
func slotOf(name string) *nncev1beta1.ApplySlot {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &e)).To(Succeed())
	if e.Status.Slot == nil {
		return &nncev1beta1.ApplySlot{}
	}
	return e.Status.Slot
}

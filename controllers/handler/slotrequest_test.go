package handler_test

import (
	"context"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestPlainRequestOnCreation: a new enactment of a policy without ippool
// captures asks the policy controller for its slot with its creation
// (ippoolv1.SlotRequestAnnotation). The policy controller's grant is the
// first write after the create, and the handler's first write is the
// outcome of its apply: a plain node costs no status write to ask.
func TestPlainRequestOnCreation(t *testing.T) {
	RegisterTestingT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := newNodes(t, "slotreq", 1, map[string]string{"slotreq": "yes"})
	const policy = "slotreq"
	name := nodes[0].Name + "." + policy

	seen, done := watchUntilAvailable(ctx, t, name)

	// The suite's handlers ask themselves after half a second; on a busy
	// machine the policy controller's answer may take longer.
	nodes[0].Tune = func(r *handler.Reconciler) { r.FailedRequeue = time.Minute }
	start(t, nodes[0])
	newPolicy(t, policy, map[string]string{"slotreq": "yes"}, nil, `{"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up"}]}`)
	Eventually(done).Should(BeClosed())
	Expect(len(*seen)).To(BeNumerically(">=", 3), "created, granted, applied")

	created := (*seen)[0]
	Expect(created.Annotations).To(HaveKeyWithValue(ippoolv1.SlotRequestAnnotation, "true"), "asks with its creation")
	Expect(created.Annotations).NotTo(HaveKey(ippoolv1.RequestAnnotation), "asks no pool for anything")
	granted := (*seen)[1]
	Expect(granted.Status.Slot).NotTo(BeNil(), "the policy controller answers first")
	Expect(granted.Status.Slot.Granted).NotTo(BeNil())
	Expect(granted.Status.Slot.Requested.IsZero()).To(BeTrue(), "the handler wrote no request of its own")
	Expect(granted.Status.Slot.PolicyGeneration).To(BeEquivalentTo(1), "the grant names the generation it was given for")
	Expect(granted.Status.PolicyGeneration).To(BeZero(), "nor anything else")
	Expect(granted.Status.Conditions).To(BeEmpty())
	for _, e := range (*seen)[2:] {
		Expect(e.Status.PolicyGeneration).NotTo(BeZero(), "every later write is the handler's, from its apply on")
	}
	Expect(nodes[0].Network.Applies.Load()).To(BeEquivalentTo(1))
}

// TestCreationGrantForAnotherGeneration: a grant on a new enactment's
// request names the policy's generation it was given for. A node whose
// policy changed between the grant and the apply (or whose grant came
// from a policy controller of an earlier version, which names none) does
// not apply the policy as it is now on that grant: its handler asks for a
// slot itself, from its creation's place in the queue, and applies the
// new generation once that is granted.
func TestCreationGrantForAnotherGeneration(t *testing.T) {
	RegisterTestingT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := newNodes(t, "staleg", 1, map[string]string{"staleg": "yes"})
	const policy = "staleg"
	name := nodes[0].Name + "." + policy
	p := newPolicy(t, policy, map[string]string{"staleg": "yes"}, nil, `{"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up"}]}`)
	before := p.DeepCopy()
	p.Spec.DesiredState = shared.NewState(`{"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up", "mtu": 1400}]}`)
	Expect(k.Patch(ctx, p, client.MergeFrom(before))).To(Succeed())
	Expect(p.Generation).To(BeEquivalentTo(2))

	seen, done := watchUntilAvailable(ctx, t, name)

	// The enactment as its handler created it, granted for generation 1:
	// the grant is written before the request annotation, so that the
	// running policy controller never answers the request itself.
	node := &corev1.Node{}
	Expect(k.Get(ctx, client.ObjectKey{Name: nodes[0].Name}, node)).To(Succeed())
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
		Name:            name,
		Labels:          map[string]string{shared.EnactmentPolicyLabel: policy, shared.EnactmentNodeLabel: node.Name},
		Annotations:     map[string]string{ippoolv1.PolicyUIDAnnotation: string(p.UID)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
	}}
	Expect(k.Create(ctx, e)).To(Succeed())
	grantedAt := metav1.NewMicroTime(time.Now())
	e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &grantedAt, PolicyGeneration: 1}
	Expect(k.Status().Update(ctx, e)).To(Succeed())
	e.Annotations[ippoolv1.SlotRequestAnnotation] = "true"
	Expect(k.Update(ctx, e)).To(Succeed())

	nodes[0].Tune = func(r *handler.Reconciler) { r.FailedRequeue = time.Minute }
	start(t, nodes[0])
	Eventually(done).Should(BeClosed())

	var asked, regranted bool
	for _, got := range *seen {
		slot := got.Status.Slot
		switch {
		case got.Status.PolicyGeneration != 0 && !asked:
			Expect(slot).NotTo(BeNil())
			Expect(slot.Granted).To(BeNil(), "the handler's first write asks again; it applies nothing on the grant for generation 1")
			Expect(slot.Requested.Time).To(BeTemporally("==", got.CreationTimestamp.Time), "from its creation's place in the queue")
			asked = true
		case asked && slot != nil && slot.Granted != nil:
			Expect(slot.PolicyGeneration).To(BeEquivalentTo(2))
			regranted = true
		}
	}
	Expect(asked).To(BeTrue())
	Expect(regranted).To(BeTrue(), "applied on a grant for generation 2")
	applied := (*seen)[len(*seen)-1]
	Expect(applied.Status.PolicyGeneration).To(BeEquivalentTo(2))
	Expect(applied.Status.DesiredState.String()).To(ContainSubstring("1400"))
	Expect(nodes[0].Network.Applies.Load()).To(BeEquivalentTo(1))
}

// watchUntilAvailable records every version of enactment name from now
// on, in seen, until one shows Available; done closes then. The watch
// ends with ctx or the test.
func watchUntilAvailable(ctx context.Context, t *testing.T, name string) (*[]nncev1beta1.NodeNetworkConfigurationEnactment, chan struct{}) {
	t.Helper()
	wc, err := envtest.ClientFor(cfg.Config)
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &nncev1beta1.NodeNetworkConfigurationEnactmentList{},
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name)})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(w.Stop)
	seen := &[]nncev1beta1.NodeNetworkConfigurationEnactment{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if e, ok := ev.Object.(*nncev1beta1.NodeNetworkConfigurationEnactment); ok && ev.Type != watch.Deleted {
				*seen = append(*seen, *e.DeepCopy())
				if trueConditionOf(e) == "Available" {
					return
				}
			}
		}
	}()
	return seen, done
}

// trueConditionOf returns the type of the enactment's True condition, or
// "" if none is.
func trueConditionOf(e *nncev1beta1.NodeNetworkConfigurationEnactment) string {
	for _, c := range e.Status.Conditions {
		if c.Status == "True" {
			return string(c.Type)
		}
	}
	return ""
}

package handler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
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

	wc, err := envtest.ClientFor(cfg.Config)
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &nncev1beta1.NodeNetworkConfigurationEnactmentList{},
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name)})
	Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	var seen []nncev1beta1.NodeNetworkConfigurationEnactment
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			e, ok := ev.Object.(*nncev1beta1.NodeNetworkConfigurationEnactment)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			seen = append(seen, *e.DeepCopy())
			if trueConditionOf(e) == "Available" {
				return
			}
		}
	}()

	// The suite's handlers ask themselves after half a second; on a busy
	// machine the policy controller's answer may take longer.
	nodes[0].Tune = func(r *handler.Reconciler) { r.FailedRequeue = time.Minute }
	start(t, nodes[0])
	newPolicy(t, policy, map[string]string{"slotreq": "yes"}, nil, `{"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up"}]}`)
	Eventually(done).Should(BeClosed())
	Expect(len(seen)).To(BeNumerically(">=", 3), "created, granted, applied")

	created := seen[0]
	Expect(created.Annotations).To(HaveKeyWithValue(ippoolv1.SlotRequestAnnotation, "true"), "asks with its creation")
	Expect(created.Annotations).NotTo(HaveKey(ippoolv1.RequestAnnotation), "asks no pool for anything")
	granted := seen[1]
	Expect(granted.Status.Slot).NotTo(BeNil(), "the policy controller answers first")
	Expect(granted.Status.Slot.Granted).NotTo(BeNil())
	Expect(granted.Status.Slot.Requested.IsZero()).To(BeTrue(), "the handler wrote no request of its own")
	Expect(granted.Status.PolicyGeneration).To(BeZero(), "nor anything else")
	Expect(granted.Status.Conditions).To(BeEmpty())
	for _, e := range seen[2:] {
		Expect(e.Status.PolicyGeneration).NotTo(BeZero(), "every later write is the handler's, from its apply on")
	}
	Expect(nodes[0].Network.Applies.Load()).To(BeEquivalentTo(1))
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

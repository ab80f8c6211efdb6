package handler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// The tests of a policy's pools as a handler finds them: not looked at by
// the pool controller yet, being rebuilt, missing, or named by a capture
// that is not one.

// TestPendingUntilPoolAvailable: no allocation before the pool controller
// marks the pool Available; the enactment says which pool and why.
func TestPendingUntilPoolAvailable(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "pending", 1, map[string]string{"role": "pending"})[0]
	newPool(t, "pending-pool", ippoolv1.IPRange{CIDR: "10.60.0.0/24"}, false)
	newPolicy(t, "pending", map[string]string{"role": "pending"}, map[string]string{"addr": "ippool.pending-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "pending")).Should(Equal(
		`Pending: NodeIPPool "pending-pool" has not been reconciled by the pool controller yet; waiting for it`))
	Expect(poolAddresses("pending-pool")).To(BeEmpty())
	markAvailable(t, "pending-pool")
	Eventually(enactmentState(nd.Name, "pending")).Should(HavePrefix("Available"))
	assertIndexed("pending-pool")
}

// TestAsksARebuildingPool: a handler that asks the pool controller for
// addresses (the default) asks it for those of a pool the controller has
// not looked at yet (one created with the policy) or is rebuilding, as for
// any pool: it does not report the pool unavailable and wait to be nudged.
// Its new enactment's request is the ask, then Pending / IPPoolBusy once it
// has waited as long as it waits for a busy pool. A rebuild that ends in a
// refusal is told at its next look; the controller, started later,
// rebuilds the pool and serves it.
func TestAsksARebuildingPool(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "asknew", 1, map[string]string{"role": "asknew"})[0]
	nd.SelfAllocate = false
	newPool(t, "asknew-pool", ippoolv1.IPRange{CIDR: "10.61.0.0/24"}, false)
	newPolicy(t, "asknew", map[string]string{"role": "asknew"}, map[string]string{"addr": "ippool.asknew-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	asking := HavePrefix(`Pending: NodeIPPool "asknew-pool": the pool controller allocates for node`)
	Eventually(enactmentState(nd.Name, "asknew")).Should(asking)
	Consistently(enactmentState(nd.Name, "asknew"), 2*time.Second).Should(asking)
	setAvailable := func(status metav1.ConditionStatus, reason, message string) {
		Eventually(func() error {
			var p ippoolv1.NodeIPPool
			if err := k.Get(context.Background(), types.NamespacedName{Name: "asknew-pool"}, &p); err != nil {
				return err
			}
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable, Status: status,
				Reason: reason, Message: message})
			return k.Status().Update(context.Background(), &p)
		}).Should(Succeed())
	}
	// Being rebuilt, as a pool controller marks it.
	setAvailable(metav1.ConditionUnknown, ippoolv1.ReasonReconcilingPool, "The pool is being updated")
	Consistently(enactmentState(nd.Name, "asknew"), 2*time.Second).Should(asking)
	Expect(poolAddresses("asknew-pool")).To(BeEmpty())
	// Refused: told.
	setAvailable(metav1.ConditionFalse, ippoolv1.ReasonOverlappingIPPool, "overlaps another")
	Eventually(enactmentState(nd.Name, "asknew")).Should(
		Equal(`Pending: NodeIPPool "asknew-pool" is not available (OverlappingIPPool: overlaps another); waiting for it`))
	// Rebuilt again: asked for again.
	setAvailable(metav1.ConditionUnknown, ippoolv1.ReasonReconcilingPool, "The pool is being updated")
	Eventually(enactmentState(nd.Name, "asknew")).Should(asking)

	pc, err := cfg.StartPoolController(raceGrace, nil, func(pc *envtest.PoolController) { pc.Policies, pc.Enactments = nil, nil })
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	Eventually(enactmentState(nd.Name, "asknew")).Should(HavePrefix("Available"))
	Expect(held(nd.Name, "asknew", "asknew-pool")).To(HaveLen(1))
	assertIndexed("asknew-pool")
}

// TestMissingPoolAndBadCapture: precise failures, and recovery when the
// pool appears.
func TestMissingPoolAndBadCapture(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "missing", 1, map[string]string{"role": "missing"})[0]
	newPolicy(t, "missing", map[string]string{"role": "missing"}, map[string]string{"addr": "ippool.later.allocate"}, envtest.OneAddressState)
	newPolicy(t, "badcapture", map[string]string{"role": "missing"}, map[string]string{"addr": "ippool.later"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "missing")).Should(Equal(`Failing: NodeIPPool "later" not found: create it, or fix capture "addr"`))
	Eventually(enactmentState(nd.Name, "badcapture")).Should(ContainSubstring(`capture "addr" is "ippool.later"; write ippool.<pool>.allocate`))
	// Nothing silent: each failure is an Event too, raised once per
	// transition however often the handler retries.
	Eventually(enactmentEvents(nd.Name, "missing")).Should(Equal([]string{`IPPoolNotFound: NodeIPPool "later" not found: create it, or fix capture "addr"`}))
	Eventually(enactmentEvents(nd.Name, "badcapture")).Should(ContainElement(HavePrefix("InvalidCapture: ")))
	newPool(t, "later", ippoolv1.IPRange{CIDR: "10.70.0.0/24"}, true)
	Eventually(enactmentState(nd.Name, "missing")).Should(HavePrefix("Available"))
	assertIndexed("later")
}

func enactmentEvents(node, policy string) func() []string {
	return func() []string {
		out, err := envtest.Events(context.Background(), k, "NodeNetworkConfigurationEnactment", node+"."+policy)
		if err != nil {
			return []string{err.Error()}
		}
		return out
	}
}

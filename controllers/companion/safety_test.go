package companion_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/companion"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// The tests here try to break the promise of one address on one NIC in the ways
// a pooled policy's records can be misled: a hostname two Nodes share, a
// range that no longer hands an address out, a cache behind the API server.

// TestSharedHostnameWritesNothing: a generated policy selects its node by
// kubernetes.io/hostname; while another Node carries the same value,
// kubernetes-nmstate's handler there would apply the first node's literal
// address too. No policy is written for the node, the pooled policy is
// Degraded naming both Nodes and the fix, and the policy is written once
// the other Node's label is its own.
func TestSharedHostnameWritesNothing(t *testing.T) {
	begin(t, "sh", "sh-1", "sh-2")
	twin := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sh-twin", Labels: map[string]string{"kubernetes.io/hostname": "sh-2"}}}
	Expect(k.Create(ctx, twin)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, twin) })
	createPool(t, "cmp-sh", rangeSpec("10.71.1.0/24", "10.71.1.10", "10.71.1.30"))
	create(t, pooled("sh", "sh", "cmp-sh", "100%"))
	Eventually(status("sh")).Should(HavePrefix("Degraded FailedToConfigure: the policy of node sh-2 selects it by kubernetes.io/hostname=sh-2, " +
		"which Node sh-twin carries too: kubernetes-nmstate's handler would put node sh-2's addresses on both"))
	// The status is written before the pass's policies: sh-1's may come a
	// moment after it.
	Eventually(generated("sh")).Should(ConsistOf("sh-sh-1"))
	Consistently(generated("sh"), 2*time.Second).Should(ConsistOf("sh-sh-1"))

	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(twin), twin); err != nil {
			return err
		}
		twin.Labels["kubernetes.io/hostname"] = twin.Name
		return k.Update(ctx, twin)
	})).To(Succeed())
	Eventually(generated("sh")).Should(ConsistOf("sh-sh-1", "sh-sh-2"))
}

// TestAddressOutsideRangeReplaced: a node's address that its pool no
// longer hands out (the pool re-created over another range) is replaced,
// as handler mode replaces it: the node gets an address of the new range,
// its policy carries only that one, the old one is no longer recorded,
// and an Event says why. Before, the old address stayed rendered with the
// new range's prefix.
func TestAddressOutsideRangeReplaced(t *testing.T) {
	u := begin(t, "or", "or-1")
	createPool(t, "cmp-or", rangeSpec("10.68.0.0/24", "10.68.0.10", "10.68.0.20"))
	create(t, pooled("or", "or", "cmp-or", "100%"))
	Eventually(status("or")).Should(HavePrefix("Available"))
	Expect(addressOf("or", "or-1")()).To(Equal("10.68.0.10"))
	Eventually(u.Configured("or-1")).Should(Equal([]string{"10.68.0.10/24"}))

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "cmp-or"}}
	Expect(k.Delete(ctx, pool)).To(Succeed())
	Eventually(func() error { return k.Get(ctx, client.ObjectKeyFromObject(pool), pool) }).Should(MatchError(ContainSubstring("not found")))
	createPool(t, "cmp-or", rangeSpec("10.68.1.0/25", "10.68.1.10", "10.68.1.20"))

	Eventually(addressOf("or", "or-1")).Should(Equal("10.68.1.10"))
	Eventually(u.Configured("or-1")).Should(Equal([]string{"10.68.1.10/25"}), "the new address replaces the old one")
	Eventually(events("or")).Should(ContainElement(
		"AddressOutsideRange: Node or-1: capture addr: 10.68.0.10 is no longer handed out by NodeIPPool \"cmp-or\" (10.68.1.0/25 10.68.1.10-10.68.1.20); " +
			"it gets new addresses, and the old ones are taken off its interfaces"))
	Eventually(func() []string {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		Expect(k.Get(ctx, types.NamespacedName{Name: "or"}, &p)).To(Succeed())
		var held []string
		for _, n := range p.Status.Nodes {
			for _, a := range n.Held() {
				held = append(held, a.IP)
			}
		}
		return held
	}).Should(Equal([]string{"10.68.1.10"}), "the old address is no longer recorded once its removal is applied")
	Eventually(status("or")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
	Expect(bits("cmp-or")()).To(Equal([]string{"10.68.1.10"}))
}

// TestStaleRecordQuarantinesNothing: a pass that reads an old copy of the
// pooled policy from its cache (after a watch outage) does not act on its
// records. Here the old copy says node st-1 still holds 10.71.0.10, which
// was released since and given to st-2: acting on it would quarantine
// st-2's address under st-1, to be lifted later on st-1's evidence while
// st-2 carries it. Before, the quarantine was written; now the pass sees
// that the API server has a newer copy and looks again.
func TestStaleRecordQuarantinesNothing(t *testing.T) {
	var stale atomic.Pointer[ippoolv1.PooledNodeNetworkConfigurationPolicy]
	u := beginWith(t, func(pc *envtest.PoolController) {
		pc.PooledPolicies.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.PooledPolicies.Client}, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if p, ok := obj.(*ippoolv1.PooledNodeNetworkConfigurationPolicy); ok && key.Name == "st" {
					if old := stale.Load(); old != nil {
						old.DeepCopyInto(p)
						return nil
					}
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
	}, "st", "st-1")
	createPool(t, "cmp-st", rangeSpec("10.71.0.0/24", "10.71.0.10", "10.71.0.12"))
	create(t, pooled("st", "st", "cmp-st", "100%"))
	Eventually(status("st")).Should(HavePrefix("Available"))
	Expect(addressOf("st", "st-1")()).To(Equal("10.71.0.10"))
	var old ippoolv1.PooledNodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, types.NamespacedName{Name: "st"}, &old)).To(Succeed())

	relabel("st-1", "elsewhere")
	Eventually(addressOf("st", "st-1")).Should(BeEmpty())
	Eventually(bits("cmp-st")).Should(BeEmpty(), "released and free once st-1 shows it gone")
	Expect(u.AddNode("st-2", map[string]string{"role": "st"})).To(Succeed())
	Eventually(addressOf("st", "st-2")).Should(Equal("10.71.0.10"))
	Eventually(status("st")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))

	stale.Store(&old)
	annotate(&ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "st"}}, "cmp-none") // any event
	Consistently(quarantined("cmp-st"), 3*time.Second).Should(BeEmpty())
	stale.Store(nil)
	Eventually(events("st")).Should(ContainElement(HavePrefix("InvalidReset: nmstate.io/reset-ippool=cmp-none")), "the pass ran once the cache caught up")
	Expect(addressOf("st", "st-2")()).To(Equal("10.71.0.10"))
	Expect(quarantined("cmp-st")()).To(BeEmpty())
}

// TestStalledPassRecordsNothing: a pass that took an address and stalls
// before its status write records it (a paused process, a slow API
// server) must never record it once the pool controller revoked it: the
// address may be another holder's by then. The pool controller fences the
// entry by writing the pooled policy under the entry's token, so the
// stalled write fails; the next pass takes an address again.
func TestStalledPassRecordsNothing(t *testing.T) {
	release, result := make(chan struct{}), make(chan error, 1)
	var stalled atomic.Bool
	beginWith(t, func(pc *envtest.PoolController) {
		pc.PooledPolicies.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.PooledPolicies.Client}, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				p, ok := obj.(*ippoolv1.PooledNodeNetworkConfigurationPolicy)
				if !ok || p.Name != "sp" || len(p.Status.Nodes) == 0 || !stalled.CompareAndSwap(false, true) {
					return c.SubResource(sub).Update(ctx, obj, opts...)
				}
				<-release
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				result <- err
				return err
			},
		})
	}, "sp", "sp-1")
	createPool(t, "cmp-sp", rangeSpec("10.79.0.0/24", "10.79.0.10", "10.79.0.10"))
	create(t, pooled("sp", "sp", "cmp-sp", "100%"))
	Eventually(stalled.Load).Should(BeTrue(), "the pass took the address and stalls before recording it")
	Eventually(events("sp")).Should(ContainElement(HavePrefix("AllocationRevoked: NodeIPPool cmp-sp revoked 10.79.0.10: taken for node sp-1")))
	close(release)
	Expect(<-result).To(MatchError(apierrors.IsConflict, "IsConflict"), "the stalled status write is refused")
	Eventually(status("sp")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
	Expect(addressOf("sp", "sp-1")()).To(Equal("10.79.0.10"), "taken again, under a live token")
}

// TestEnactmentOfAnEarlierPolicyIsNotTakenUp: kubernetes-nmstate's
// handler keeps the enactment of a policy deleted while it was down, and
// takes it up for a new policy of the same name, at generation 1 again:
// its first write for the new policy (the status, conditions as they
// were) would show the earlier policy's Available as the new one's, the
// node counted as configured before anything was applied. The controller
// deletes such an enactment before it creates the policy.
func TestEnactmentOfAnEarlierPolicyIsNotTakenUp(t *testing.T) {
	u := begin(t, "ep", "ep-1")
	createPool(t, "cmp-ep", rangeSpec("10.71.3.0/24", "10.71.3.10", "10.71.3.30"))
	u.Down("ep-1", true)
	key := shared.EnactmentKey("ep-1", "ep-ep-1")
	enactment := func() *nncev1beta1.NodeNetworkConfigurationEnactment {
		return &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: key.Name,
			Labels: map[string]string{shared.EnactmentNodeLabel: "ep-1", shared.EnactmentPolicyLabel: "ep-ep-1"}}}
	}
	earlier := enactment()
	Expect(k.Create(ctx, earlier)).To(Succeed())
	earlier.Status.PolicyGeneration = 1
	earlier.Status.Conditions = conditions.OneTrue(nil, shared.NodeNetworkConfigurationEnactmentConditionTypes[:],
		shared.NodeNetworkConfigurationEnactmentConditionAvailable, shared.NodeNetworkConfigurationEnactmentConditionSuccessfullyConfigured, "", time.Now())
	Expect(k.Status().Update(ctx, earlier)).To(Succeed())

	create(t, pooled("ep", "ep", "cmp-ep", "1"))
	Eventually(generated("ep")).Should(ConsistOf("ep-ep-1"))
	// The handler's first write for the new policy, on the enactment of
	// the name it finds (created if none).
	e := enactment()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := k.Get(ctx, key, e)
		if apierrors.IsNotFound(err) {
			e = enactment()
			err = k.Create(ctx, e)
		}
		if err != nil {
			return err
		}
		e.Status.PolicyGeneration = 1
		return k.Status().Update(ctx, e)
	})).To(Succeed())
	Expect(e.UID).NotTo(Equal(earlier.UID), "the earlier policy's enactment is deleted before the policy is created")
	Consistently(status("ep"), 2*time.Second).ShouldNot(HavePrefix("Available"))

	u.Down("ep-1", false)
	Eventually(status("ep")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"), describe("ep"))
	Expect(u.Configured("ep-1")()).NotTo(BeEmpty())
}

// TestEarlierEnactmentThatBlocksSaysSo: an enactment under the name of a
// node's policy-to-be that is another node's or policy's (names with dots
// collide), or an earlier policy's that finalizers keep while it is being
// deleted, stops the policy's create; the pooled policy's condition says
// which and the way out, and the policy is created once it is gone.
func TestEarlierEnactmentThatBlocksSaysSo(t *testing.T) {
	begin(t, "eb", "eb-1", "eb-2")
	createPool(t, "cmp-eb", rangeSpec("10.71.4.0/24", "10.71.4.10", "10.71.4.30"))
	blocking := func(node string, labels map[string]string, finalizers ...string) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
			Name: shared.EnactmentKey(node, "eb-"+node).Name, Labels: labels, Finalizers: finalizers}}
		Expect(envtest.CreateForTest(t, k, e)).To(Succeed())
		return e
	}
	// eb-1's is another node's; eb-2's an earlier policy's, being deleted
	// and kept by a finalizer whose controller is gone.
	collided := blocking("eb-1", map[string]string{shared.EnactmentNodeLabel: "eb-1.eb", shared.EnactmentPolicyLabel: "other"})
	kept := blocking("eb-2", map[string]string{shared.EnactmentNodeLabel: "eb-2", shared.EnactmentPolicyLabel: "eb-eb-2"}, "example.com/gone")
	Expect(k.Delete(ctx, kept)).To(Succeed())

	create(t, pooled("eb", "eb", "cmp-eb", "2"))
	Eventually(status("eb")).Should(SatisfyAll(
		ContainSubstring(`enactment eb-1.eb-eb-1, which policy eb-eb-1 of node eb-1 would use, is node "eb-1.eb"'s of policy "other": the names collide`),
		ContainSubstring("enactment eb-2.eb-eb-2, left by an earlier policy eb-eb-2, is being deleted and finalizers [example.com/gone] keep it"),
	), describe("eb"))
	Consistently(generated("eb"), 2*time.Second).Should(BeEmpty())
	Expect(recorded("eb")()).To(HaveLen(2), "both nodes keep their addresses while they wait")

	Expect(k.Get(ctx, client.ObjectKeyFromObject(kept), kept)).To(Succeed())
	kept.Finalizers = nil
	Expect(k.Update(ctx, kept)).To(Succeed())
	// The enactment's deletion brings the pooled policy back at once, not
	// at the next poll of a policy with problems (ProgressPoll).
	Eventually(generated("eb"), companion.ProgressPoll*2/3).Should(ConsistOf("eb-eb-2"), describe("eb"))
	Expect(status("eb")()).NotTo(ContainSubstring("eb-2.eb-eb-2"))

	Expect(k.Delete(ctx, collided)).To(Succeed())
	Eventually(generated("eb"), companion.ProgressPoll*2/3).Should(ConsistOf("eb-eb-1", "eb-eb-2"), describe("eb"))
	Eventually(status("eb")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"), describe("eb"))
}

// TestClearEarlierKeepsAnEnactmentChangedMeanwhile: an earlier policy's
// enactment that changes between clearEarlier's read and its delete (the
// handler took it up meanwhile) is kept: the delete is under the
// resourceVersion read, its conflict looks at the create again, and
// nothing remembers the enactment as cleared. Run against the API server,
// which checks the precondition the fake client ignores.
func TestClearEarlierKeepsAnEnactmentChangedMeanwhile(t *testing.T) {
	const node, name = "ce-1", "ce-ce-1"
	key := shared.EnactmentKey(node, name)
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: key.Name,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: name}}}
	if err := k.Create(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	// The handler's write lands right after the controller's read.
	var touched bool
	reader := interceptor.NewClient(envtest.WithoutWatch{Client: k}, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch,
		key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		if read, ok := obj.(*nncev1beta1.NodeNetworkConfigurationEnactment); ok && !touched {
			touched = true
			taken := read.DeepCopy()
			taken.Status.PolicyGeneration = 1
			return k.Status().Update(ctx, taken)
		}
		return nil
	}})
	r := &companion.Reconciler{Client: k, APIReader: reader, Recorder: kevents.NewFakeRecorder(10)}
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ce"}}
	err := r.ClearEarlier(ctx, p, node, name)
	if !apierrors.IsConflict(err) {
		t.Fatalf("clearEarlier = %v, want a conflict: the create is looked at again", err)
	}
	var got nncev1beta1.NodeNetworkConfigurationEnactment
	if err := k.Get(ctx, key, &got); err != nil || !got.DeletionTimestamp.IsZero() {
		t.Fatalf("the enactment changed meanwhile must stay: %v, deleted at %v", err, got.DeletionTimestamp)
	}
	if r.Cleared(key.Name) {
		t.Error("an enactment that stays is remembered as cleared")
	}
}

// refuseFirstRecord has the first status write of pooled policy name that
// records a node refused, as another write that lands between the pass's
// read and its write makes it: meanwhile makes that write, with the
// policy the pass is writing. withdrawn counts the addresses the pool
// controller's companion gives back.
func refuseFirstRecord(name string, refused *atomic.Bool, withdrawn *atomic.Int32,
	meanwhile func(context.Context, *ippoolv1.PooledNodeNetworkConfigurationPolicy) error) func(*envtest.PoolController) {
	return func(pc *envtest.PoolController) {
		pc.PooledPolicies.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.PooledPolicies.Client}, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				p, ok := obj.(*ippoolv1.PooledNodeNetworkConfigurationPolicy)
				if ok && p.Name == name && len(p.Status.Nodes) > 0 && refused.CompareAndSwap(false, true) {
					if err := meanwhile(ctx, p.DeepCopy()); err != nil {
						return err
					}
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		})
		trail := pc.PooledPolicies.Pools.Audit
		pc.PooledPolicies.Pools.Audit = func(ctx context.Context, changes []audit.Change) {
			for _, c := range changes {
				if c.Event == audit.Withdrawn {
					withdrawn.Add(1)
				}
			}
			if trail != nil {
				trail(ctx, changes)
			}
		}
	}
}

// TestRefusedRecordGivesItsAddressesBack: a pass whose status write is
// refused because the pooled policy changed since it read it (its token)
// gives back, at once, the addresses it took for that record: no later
// pass can record them under that token, and the pool controller would
// only revoke and collect them after its grace periods, the pool short
// of them meanwhile. The next pass takes the lowest free address again.
func TestRefusedRecordGivesItsAddressesBack(t *testing.T) {
	var refused atomic.Bool
	var withdrawn atomic.Int32
	beginWith(t, refuseFirstRecord("rr", &refused, &withdrawn, func(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
		// An admin's edit.
		edited := &ippoolv1.PooledNodeNetworkConfigurationPolicy{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), edited); err != nil {
			return err
		}
		edited.Annotations = map[string]string{"example.com/edited": "yes"}
		return k.Update(ctx, edited)
	}), "rr", "rr-1")
	createPool(t, "cmp-rr", rangeSpec("10.79.1.0/24", "10.79.1.10", "10.79.1.11"))
	create(t, pooled("rr", "rr", "cmp-rr", "100%"))
	Eventually(refused.Load).Should(BeTrue())
	Eventually(status("rr")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"), describe("rr"))
	Expect(addressOf("rr", "rr-1")()).To(Equal("10.79.1.10"), "the refused pass's address was given back, and taken again")
	Expect(bits("cmp-rr")()).To(Equal([]string{"10.79.1.10"}))
	Expect(withdrawn.Load()).To(BeNumerically("==", 1))
	Expect(events("rr")()).NotTo(ContainElement(HavePrefix("AllocationRevoked")))
}

// TestRefusedRecordKeepsWhatAnotherPassRecorded: the write that refuses a
// pass's record may be another pass's record of the same addresses under
// the same token (a leader that took over from a stalled one resumed its
// in-flight entries and recorded them; a status write that landed late).
// The refused pass gives back nothing that the policy, read again,
// records: the bit stays set under the record.
func TestRefusedRecordKeepsWhatAnotherPassRecorded(t *testing.T) {
	var refused atomic.Bool
	var withdrawn atomic.Int32
	beginWith(t, refuseFirstRecord("rk", &refused, &withdrawn, func(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
		// The other pass's record: the same status, under the same
		// resourceVersion.
		return k.Status().Update(ctx, p)
	}), "rk", "rk-1")
	createPool(t, "cmp-rk", rangeSpec("10.79.2.0/24", "10.79.2.10", "10.79.2.11"))
	create(t, pooled("rk", "rk", "cmp-rk", "100%"))
	Eventually(refused.Load).Should(BeTrue())
	Eventually(status("rk")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"), describe("rk"))
	Expect(addressOf("rk", "rk-1")()).To(Equal("10.79.2.10"))
	Expect(bits("cmp-rk")()).To(Equal([]string{"10.79.2.10"}))
	Expect(withdrawn.Load()).To(BeZero(), "nothing the other pass recorded is given back")
}

// TestReleaseWaitsForItsQuarantine: a node the policy no longer selects,
// while its addresses cannot be quarantined (the pool's status writes
// fail), keeps its record and its policy as they are: nothing takes the
// addresses off before the pool keeps them from everyone. Once the
// quarantine is written, the release goes on and finishes.
func TestReleaseWaitsForItsQuarantine(t *testing.T) {
	var fault envtest.PoolWriteFault
	u := rolledOut(t, func(pc *envtest.PoolController) {
		pc.PooledPolicies.Pools = envtest.FailingPoolWrites(pc.PooledPolicies.Pools, &fault)
	},
		"rq", "10.78.0.0/24", "10.78.0.10", "10.78.0.30", "rq-1", "rq-2")
	held := addressOf("rq", "rq-2")()

	fault.On.Store(true)
	relabel("rq-2", "elsewhere")
	Eventually(fault.Refused.Load).Should(BeNumerically(">", 0), "the release tried to quarantine")
	Consistently(func() []string { return quarantined("cmp-rq")() }, 2*time.Second).Should(BeEmpty())
	Expect(addressOf("rq", "rq-2")()).To(Equal(held), "recorded until its quarantine is written")
	Expect(u.Configured("rq-2")()).To(ConsistOf(held+"/24"), "not taken off before its quarantine is written")
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, types.NamespacedName{Name: "rq"}, &p)).To(Succeed())
	Expect(p.Status.NodeOf("rq-2").Releasing).To(BeFalse(), "no release begins without its quarantine")

	fault.On.Store(false)
	Eventually(addressOf("rq", "rq-2")).Should(BeEmpty())
	Expect(u.Configured("rq-2")()).To(BeEmpty())
	Eventually(generated("rq")).Should(ConsistOf("rq-rq-1"))
	Eventually(bits("cmp-rq")).ShouldNot(ContainElement(held))
}

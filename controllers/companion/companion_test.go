package companion_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolmetrics"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

func intOrString(s string) intstr.IntOrString { return intstr.Parse(s) }

func rangeSpec(cidr, start, end string) ippoolv1.NodeIPPoolSpec {
	return ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: cidr, Start: start, End: end}}
}

// addressOf returns the address the pooled policy records for node, "" if
// none.
func addressOf(policy, node string) func() string {
	return func() string {
		for _, r := range recorded(policy)() {
			if n, ip, _ := strings.Cut(r, " "); n == node {
				return ip
			}
		}
		return ""
	}
}

// relabel sets a node's role label.
func relabel(node, role string) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := k.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			return err
		}
		n.Labels["role"] = role
		return k.Update(ctx, &n)
	})).To(Succeed())
}

// annotate sets the reset annotation on an object.
func annotate(o client.Object, value string) {
	Expect(envtest.Annotate(ctx, k, o, ippoolv1.ResetIPPoolAnnotation, value)).To(Succeed())
}

// TestRolloutPacedAndRecorded: every selected node gets its own address,
// recorded in the pooled policy's status and set in the pool, and a plain
// NNCP that selects it by hostname with the address written in; the NNCPs
// are rolled out no more than maxUnavailable at a time; the status says
// what kubernetes-nmstate says of a policy.
func TestRolloutPacedAndRecorded(t *testing.T) {
	u := begin(t, "roll", "roll-1", "roll-2", "roll-3", "roll-4")
	createPool(t, "cmp-roll", rangeSpec("10.61.0.0/24", "10.61.0.10", "10.61.0.30"))
	u.Hold(true)
	p := pooled("roll", "roll", "cmp-roll", "1")
	p.Spec.Capture["gw"] = `routes.running.destination=="0.0.0.0/0"`
	create(t, p)

	Eventually(recorded("roll")).Should(HaveLen(4), "every node's address is taken up front")
	Expect(bits("cmp-roll")()).To(ConsistOf("10.61.0.10", "10.61.0.11", "10.61.0.12", "10.61.0.13"))
	Eventually(generated("roll")).Should(HaveLen(1))
	Consistently(generated("roll"), 2*time.Second).Should(HaveLen(1), "maxUnavailable 1: one node at a time")
	Expect(status("roll")()).To(Equal("Progressing ConfigurationProgressing: Policy is progressing 0/4 nodes finished"))

	for i := 1; i <= 4; i++ {
		names := generated("roll")()
		Expect(names).To(HaveLen(i))
		for _, name := range names {
			var g nmstatev1.NodeNetworkConfigurationPolicy
			Expect(k.Get(ctx, types.NamespacedName{Name: name}, &g)).To(Succeed())
			Expect(u.Finish(g.Annotations[ippoolv1.PooledNodeAnnotation])).To(Succeed())
		}
		if i < 4 {
			Eventually(generated("roll")).Should(HaveLen(i + 1))
		}
	}
	Eventually(status("roll")).Should(Equal("Available SuccessfullyConfigured: 4/4 nodes successfully configured"))
	Expect(u.MaxBusy()).To(BeNumerically("<=", 1), "never more nodes progressing than maxUnavailable")

	var g nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, types.NamespacedName{Name: "roll-roll-2"}, &g)).To(Succeed())
	Expect(g.Spec.NodeSelector).To(Equal(map[string]string{"kubernetes.io/hostname": "roll-2"}))
	Expect(g.Spec.Capture).To(Equal(map[string]string{"gw": `routes.running.destination=="0.0.0.0/0"`}),
		"the ordinary capture is passed through, the ippool one is not")
	var desired map[string]any
	Expect(yaml.Unmarshal(g.Spec.DesiredState.Raw, &desired)).To(Succeed())
	addr := desired["interfaces"].([]any)[0].(map[string]any)["ipv4"].(map[string]any)["address"].([]any)[0].(map[string]any)
	Expect(addr).To(Equal(map[string]any{"ip": addressOf("roll", "roll-2")(), "prefix-length": float64(24)}))
	Expect(metav1.GetControllerOf(&g).Kind).To(Equal("PooledNodeNetworkConfigurationPolicy"))
	for _, node := range []string{"roll-1", "roll-2", "roll-3", "roll-4"} {
		Expect(u.Configured(node)()).To(Equal([]string{addressOf("roll", node)() + "/24"}))
	}
}

// TestNodesComeAndGo: a node deselected has its address taken off its NIC
// before its NNCP goes, and the address is free once its network shows it
// gone; a deleted node's address is taken off too, kept for it and handed
// back when it returns under its name; a joining node gets an NNCP.
func TestNodesComeAndGo(t *testing.T) {
	u := begin(t, "cg", "cg-1", "cg-2", "cg-3")
	createPool(t, "cmp-cg", rangeSpec("10.62.0.0/24", "10.62.0.10", "10.62.0.30"))
	create(t, pooled("cg", "cg", "cmp-cg", "100%"))
	Eventually(status("cg")).Should(Equal("Available SuccessfullyConfigured: 3/3 nodes successfully configured"))
	second, third := addressOf("cg", "cg-2")(), addressOf("cg", "cg-3")()

	// A node no longer selected.
	relabel("cg-2", "elsewhere")
	Eventually(generated("cg")).Should(ConsistOf("cg-cg-1", "cg-cg-3"))
	Expect(u.Configured("cg-2")()).To(BeEmpty(), "the address was taken off before its NNCP went")
	Expect(addressOf("cg", "cg-2")()).To(BeEmpty())
	Eventually(bits("cmp-cg")).ShouldNot(ContainElement(second), "freed once the node's state shows it gone")
	Eventually(status("cg")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))

	// A node deleted, then back under its name.
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cg-3"}})).To(Succeed())
	Eventually(generated("cg")).Should(ConsistOf("cg-cg-1"))
	Eventually(addressOf("cg", "cg-3")).Should(BeEmpty())
	Expect(u.Configured("cg-3")()).To(BeEmpty(), "taken off before the Node went")
	Eventually(node("cg-3")).Should(ContainSubstring("not found"))
	Expect(k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cg-3",
		Labels: map[string]string{"role": "cg", "kubernetes.io/hostname": "cg-3"}}})).To(Succeed())
	Eventually(addressOf("cg", "cg-3")).Should(Equal(third), "the same address back")

	// A node joins.
	Expect(u.AddNode("cg-4", map[string]string{"role": "cg"})).To(Succeed())
	Eventually(generated("cg")).Should(ConsistOf("cg-cg-1", "cg-cg-3", "cg-cg-4"))
	Eventually(status("cg")).Should(Equal("Available SuccessfullyConfigured: 3/3 nodes successfully configured"), describe("cg"))
	Expect(addressOf("cg", "cg-4")()).NotTo(BeElementOf(addressOf("cg", "cg-1")(), third))
}

// TestDeletionTakesAddressesOff: deleting a pooled policy takes its
// addresses off its nodes' NICs before its NNCPs go, and frees them.
func TestDeletionTakesAddressesOff(t *testing.T) {
	u := begin(t, "del", "del-1", "del-2")
	createPool(t, "cmp-del", rangeSpec("10.63.0.0/24", "10.63.0.10", "10.63.0.30"))
	p := pooled("del", "del", "cmp-del", "")
	create(t, p)
	Eventually(status("del")).Should(HavePrefix("Available"))
	Expect(u.Configured("del-1")()).To(HaveLen(1))

	Expect(k.Delete(ctx, p)).To(Succeed())
	Eventually(generated("del")).Should(BeEmpty())
	Expect(u.Configured("del-1")()).To(BeEmpty(), "off the NIC before the NNCP went")
	Expect(u.Configured("del-2")()).To(BeEmpty())
	Eventually(func() error {
		return k.Get(ctx, client.ObjectKeyFromObject(p), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
	}).Should(MatchError(ContainSubstring("not found")))
	Eventually(bits("cmp-del")).Should(BeEmpty())
	Expect(quarantined("cmp-del")()).To(BeEmpty())
}

// TestExhaustedThenGrown: a pool too small leaves a node without an
// address, said in the status (Degraded, naming the node and the fix) and
// an Event; growing the pool in place serves it.
func TestExhaustedThenGrown(t *testing.T) {
	waiting := poolmetrics.NewWaiting()
	beginWith(t, func(pc *envtest.PoolController) { pc.PooledPolicies.Waiting = waiting }, "ex", "ex-1", "ex-2", "ex-3")
	createPool(t, "cmp-ex", rangeSpec("10.64.0.0/24", "10.64.0.10", "10.64.0.11"))
	create(t, pooled("ex", "ex", "cmp-ex", "100%"))
	Eventually(status("ex")).Should(And(HavePrefix("Degraded IPPoolExhausted: NodeIPPool cmp-ex has no address left for node ex-3"),
		ContainSubstring("grow the pool's range"), HaveSuffix("(2/3 nodes successfully configured)")))
	Eventually(events("ex")).Should(ContainElement(HavePrefix("IPPoolExhausted: NodeIPPool cmp-ex has no address left for node ex-3")))
	Expect(generated("ex")()).To(ConsistOf("ex-ex-1", "ex-ex-2"))
	Expect(waiting.On("cmp-ex")).To(Equal([]string{"PooledNodeNetworkConfigurationPolicy/ex/ex-3"}), "the metric of waiting holders counts it")

	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pool ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "cmp-ex"}, &pool); err != nil {
			return err
		}
		pool.Spec.Range.End = "10.64.0.12"
		return k.Update(ctx, &pool)
	})).To(Succeed())
	Eventually(status("ex")).Should(Equal("Available SuccessfullyConfigured: 3/3 nodes successfully configured"))
	Expect(addressOf("ex", "ex-3")()).To(Equal("10.64.0.12"))
	Expect(waiting.On("cmp-ex")).To(BeEmpty())
}

// TestResets: the reset annotation on a generated NNCP gives its node a new
// address; on the pooled policy, every node; the old addresses are off the
// NICs and free once the nodes show it.
func TestResets(t *testing.T) {
	u := begin(t, "rs", "rs-1", "rs-2")
	createPool(t, "cmp-rs", rangeSpec("10.65.0.0/24", "10.65.0.10", "10.65.0.30"))
	p := pooled("rs", "rs", "cmp-rs", "100%")
	create(t, p)
	Eventually(status("rs")).Should(HavePrefix("Available"))
	first, second := addressOf("rs", "rs-1")(), addressOf("rs", "rs-2")()

	annotate(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rs-rs-1"}}, "cmp-rs")
	Eventually(addressOf("rs", "rs-1")).ShouldNot(Or(Equal(first), BeEmpty()))
	Expect(addressOf("rs", "rs-2")()).To(Equal(second))
	renewed := addressOf("rs", "rs-1")()
	Eventually(u.Configured("rs-1")).Should(Equal([]string{renewed + "/24"}), "the new address replaces the old one")
	Consistently(addressOf("rs", "rs-1"), 2*time.Second).Should(Equal(renewed), "one reset, one new address")
	Eventually(func() map[string]string {
		var g nmstatev1.NodeNetworkConfigurationPolicy
		_ = k.Get(ctx, types.NamespacedName{Name: "rs-rs-1"}, &g)
		return g.Annotations
	}).ShouldNot(HaveKey(ippoolv1.ResetIPPoolAnnotation))
	Eventually(bits("cmp-rs")).ShouldNot(ContainElement(first))
	Eventually(events("rs")).Should(ContainElement(ContainSubstring("Dropped " + first + " of node rs-1")))

	annotate(p, "cmp-rs")
	Eventually(addressOf("rs", "rs-2")).ShouldNot(Or(Equal(second), BeEmpty()))
	Eventually(addressOf("rs", "rs-1")).ShouldNot(Or(Equal(renewed), BeEmpty()))
	Eventually(status("rs")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))

	// A reset that names no pool of the policy changes nothing, and says so.
	kept := addressOf("rs", "rs-2")()
	annotate(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rs-rs-2"}}, "no-such-pool")
	Eventually(events("rs")).Should(ContainElement(HavePrefix("InvalidReset: nmstate.io/reset-ippool=no-such-pool on NodeNetworkConfigurationPolicy rs-rs-2")))
	Expect(addressOf("rs", "rs-2")()).To(Equal(kept))
}

// TestResetThatCannotBeReplacedFirst: a reset is make before break, but
// a pool with no address for the node (what is free is reserved for
// another), or one being deleted, hands nothing out until the reset
// address's quarantine lifts, which waits for the address to come off.
// The address then comes off first: the full pool hands it back once the
// node shows it gone, and the pool being deleted goes.
// Before, the generated NNCP kept it on for a replacement that never came.
func TestResetThatCannotBeReplacedFirst(t *testing.T) {
	u := beginWith(t, func(pc *envtest.PoolController) { pc.PooledPolicies.RemovalRetry = time.Second }, "rf", "rf-1", "rf-2")
	// Its one free address is reserved for a node yet to come: free in the
	// bitmap, but not for these nodes.
	spec := rangeSpec("10.69.0.0/24", "10.69.0.10", "10.69.0.12")
	spec.Reservations = []ippoolv1.Reservation{{IP: "10.69.0.12", Node: "rf-later"}}
	createPool(t, "cmp-rf", spec)
	create(t, pooled("rf", "rf", "cmp-rf", "100%"))
	Eventually(status("rf")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
	first := addressOf("rf", "rf-1")()

	annotate(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rf-rf-1"}}, "cmp-rf")
	Eventually(u.Configured("rf-1")).Should(BeEmpty(), "a full pool: off before it can come back")
	Eventually(addressOf("rf", "rf-1")).Should(Equal(first), "handed back once the node showed it gone")
	Eventually(u.Configured("rf-1")).Should(Equal([]string{first + "/24"}))
	Eventually(status("rf")).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))

	// A pool being deleted, kept by someone else's finalizer meanwhile.
	var pool ippoolv1.NodeIPPool
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, types.NamespacedName{Name: "cmp-rf"}, &pool); err != nil {
			return err
		}
		pool.Finalizers = append(pool.Finalizers, "example.com/keep")
		return k.Update(ctx, &pool)
	})).To(Succeed())
	Expect(k.Delete(ctx, &pool)).To(Succeed())
	second := addressOf("rf", "rf-2")()
	// The node fails to apply the policy without it for a while: it is
	// written again, as a failed release's is.
	u.Fail("rf-2", true)
	annotate(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rf-rf-2"}}, "cmp-rf")
	Eventually(events("rf")).Should(ContainElement(HavePrefix("RemovalRetried: Trying again to take " + second + " off node rf-2")))
	Expect(u.Configured("rf-2")()).To(Equal([]string{second + "/24"}))
	u.Fail("rf-2", false)
	Eventually(u.Configured("rf-2"), time.Minute).Should(BeEmpty(), "a pool being deleted hands nothing out: off first")
	Eventually(quarantined("cmp-rf")).ShouldNot(ContainElement(second+" rf-2"), "lifted on the node's evidence")
	Eventually(func() []string { _ = k.Get(ctx, types.NamespacedName{Name: "cmp-rf"}, &pool); return pool.Finalizers }).
		Should(Equal([]string{"example.com/keep"}), "the pool lets go")
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, types.NamespacedName{Name: "cmp-rf"}, &pool); err != nil {
			return client.IgnoreNotFound(err)
		}
		pool.Finalizers = nil
		return k.Update(ctx, &pool)
	})).To(Succeed())
	Expect(u.Configured("rf-1")()).To(Equal([]string{first + "/24"}), "the other node keeps its address")
}

// TestPoolSettingsReservationsAndAdoption: gateway and DNS are written in
// from the pool, a reservation goes to its node, and a node that already
// carries an address of the pool on the interface keeps it (moving from
// per-node NNCPs renumbers nothing).
func TestPoolSettingsReservationsAndAdoption(t *testing.T) {
	u := begin(t, "gw", "gw-1", "gw-2", "gw-3")
	spec := rangeSpec("10.66.0.0/24", "10.66.0.10", "10.66.0.100")
	spec.Gateway = "10.66.0.1"
	spec.DNS = &ippoolv1.DNS{Servers: []string{"10.66.0.53"}}
	spec.Reservations = []ippoolv1.Reservation{{IP: "10.66.0.50", Node: "gw-2"}}
	createPool(t, "cmp-gw", spec)
	// gw-3 carries 10.66.0.77 on eth1, as a per-node NNCP left it.
	n := u.Node("gw-3")
	Expect(n.Network.Apply(ctx, []byte(`{"interfaces":[{"name":"eth1","type":"ethernet","state":"up","ipv4":{"enabled":true,"dhcp":false,"address":[{"ip":"10.66.0.77","prefix-length":24}]}}]}`))).To(Succeed())
	Expect(n.Network.Commit(ctx)).To(Succeed())
	Expect(u.Publish("gw-3")).To(Succeed())

	p := pooled("gw", "gw", "cmp-gw", "100%")
	p.Spec.DesiredState = shared.NewState(oneAddressWithDNS)
	create(t, p)
	Eventually(status("gw")).Should(Equal("Available SuccessfullyConfigured: 3/3 nodes successfully configured"))
	Expect(addressOf("gw", "gw-1")()).To(Equal("10.66.0.10"))
	Expect(addressOf("gw", "gw-2")()).To(Equal("10.66.0.50"), "reserved for gw-2")
	Expect(addressOf("gw", "gw-3")()).To(Equal("10.66.0.77"), "adopted: the node's network does not change")
	Eventually(events("gw")).Should(ContainElement(ContainSubstring("10.66.0.77")))

	var g nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, types.NamespacedName{Name: "gw-gw-1"}, &g)).To(Succeed())
	var desired map[string]any
	Expect(yaml.Unmarshal(g.Spec.DesiredState.Raw, &desired)).To(Succeed())
	Expect(desired["routes"]).To(Equal(map[string]any{"config": []any{map[string]any{
		"destination": "0.0.0.0/0", "next-hop-address": "10.66.0.1", "next-hop-interface": "eth1"}}}))
	Expect(desired["dns-resolver"]).To(Equal(map[string]any{"config": map[string]any{"server": []any{"10.66.0.53"}}}))
}

// oneAddressWithDNS puts the capture addr on eth1 with the pool's
// gateway as default route and its DNS servers.
const oneAddressWithDNS = envtest.OneAddressState + `routes:
  config:
  - destination: 0.0.0.0/0
    next-hop-address: "{{ capture.addr.gateway }}"
    next-hop-interface: eth1
dns-resolver:
  config:
    server: "{{ capture.addr.dns-servers }}"
`

// TestRefusals: a template that reads what the pool does not give holds
// no address and generates nothing (Degraded, naming the setting); the
// capture is immutable at admission.
func TestRefusals(t *testing.T) {
	begin(t, "bad", "bad-1")
	createPool(t, "cmp-bad", rangeSpec("10.67.0.0/24", "10.67.0.10", "10.67.0.30"))
	p := pooled("bad", "bad", "cmp-bad", "")
	p.Spec.DesiredState = shared.NewState(oneAddressWithDNS)
	create(t, p)
	Eventually(status("bad")).Should(And(HavePrefix("Degraded InvalidCapture:"), ContainSubstring("NodeIPPool cmp-bad sets no spec.gateway")))
	Consistently(recorded("bad"), time.Second).Should(BeEmpty())
	Expect(generated("bad")()).To(BeEmpty())

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.Capture["addr"] = "ippool.other.allocate"
		return k.Update(ctx, p)
	})
	Expect(err).To(MatchError(ContainSubstring("spec.capture is immutable")))

	long := pooled(strings.Repeat("x", 64), "bad", "cmp-bad", "")
	Expect(k.Create(ctx, long)).To(MatchError(ContainSubstring("63 characters or less")))
}

// TestPoolControllerCountsTheRecords: a pool rebuilt (reset) keeps the
// pooled policy's addresses, and a range change that would drop one is
// refused, naming the node and the pooled policy.
func TestPoolControllerCountsTheRecords(t *testing.T) {
	begin(t, "pc", "pc-1", "pc-2")
	createPool(t, "cmp-pc", rangeSpec("10.68.0.0/24", "10.68.0.10", "10.68.0.30"))
	create(t, pooled("pc", "pc", "cmp-pc", "100%"))
	Eventually(status("pc")).Should(HavePrefix("Available"))
	held := []string{addressOf("pc", "pc-1")(), addressOf("pc", "pc-2")()}

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "cmp-pc"}}
	annotate(pool, "")
	Eventually(func() map[string]string {
		_ = k.Get(ctx, client.ObjectKeyFromObject(pool), pool)
		return pool.Annotations
	}).ShouldNot(HaveKey(ippoolv1.ResetIPPoolAnnotation))
	Eventually(bits("cmp-pc")).Should(ConsistOf(held))

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		pool.Spec.Range.Exclude = []string{held[1]}
		return k.Update(ctx, pool)
	})
	Expect(err).To(MatchError(And(ContainSubstring(held[1]), ContainSubstring("PooledNodeNetworkConfigurationPolicy pc"))))
}

// TestFailedRemovalKeepsTheRecord: a node that cannot apply the policy
// taking its address off keeps the address recorded and quarantined (the
// status says so) until it can, or until its Node is deleted and tainted
// out of service (its machine shut down for good).
func TestFailedRemovalKeepsTheRecord(t *testing.T) {
	u := rolledOut(t, asIs, "fr", "10.69.0.0/24", "10.69.0.10", "10.69.0.30", "fr-1", "fr-2")
	held := addressOf("fr", "fr-2")()

	u.Fail("fr-2", true)
	relabel("fr-2", "elsewhere")
	Eventually(status("fr")).Should(And(HavePrefix("Degraded FailedToConfigure: node fr-2 could not apply policy fr-fr-2"),
		ContainSubstring("stay recorded and quarantined")))
	Consistently(addressOf("fr", "fr-2"), 2*time.Second).Should(Equal(held))
	Expect(u.Configured("fr-2")()).To(ConsistOf(held + "/24"))
	Expect(bits("cmp-fr")()).To(ContainElement(held))

	// Its machine shut down for good: the way out.
	deleteNode("fr-2")
	Consistently(addressOf("fr", "fr-2"), time.Second).Should(Equal(held), "a deleted Node's machine may still run")
	updateNode("fr-2", outOfService)
	Eventually(addressOf("fr", "fr-2")).Should(BeEmpty())
	Eventually(generated("fr")).Should(ConsistOf("fr-fr-1"))
	Eventually(status("fr")).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
}

// TestFailedRemovalIsTriedAgain: a node that failed to apply the policy
// taking its address off (kubernetes-nmstate's handler gave up on it) is
// given that policy again, as a new generation, once the backoff has
// passed; once it applies, the release finishes.
func TestFailedRemovalIsTriedAgain(t *testing.T) {
	u := rolledOut(t, func(pc *envtest.PoolController) { pc.PooledPolicies.RemovalRetry = time.Second },
		"ta", "10.77.0.0/24", "10.77.0.10", "10.77.0.30", "ta-1", "ta-2")
	held := addressOf("ta", "ta-2")()

	u.Fail("ta-2", true)
	relabel("ta-2", "elsewhere")
	Eventually(status("ta")).Should(HavePrefix("Degraded FailedToConfigure: node ta-2 could not apply policy ta-ta-2"))
	Eventually(events("ta")).Should(ContainElement(And(HavePrefix("RemovalRetried: Trying again to take "+held+" off node ta-2: policy ta-ta-2 failed"),
		HaveSuffix("(attempt 2)"))))
	Expect(addressOf("ta", "ta-2")()).To(Equal(held), "recorded while it fails")

	u.Fail("ta-2", false)
	Eventually(addressOf("ta", "ta-2"), time.Minute).Should(BeEmpty())
	Expect(u.Configured("ta-2")()).To(BeEmpty())
	Eventually(generated("ta")).Should(ConsistOf("ta-ta-1"))
	Eventually(bits("cmp-ta")).ShouldNot(ContainElement(held))
}

// TestReleaseOfANodeNeverConfigured: a node whose policy was never written
// (held back by maxUnavailable) gives its address back at once when it is
// no longer selected: nothing of ours put it on its NIC, and its network
// state, which kubernetes-nmstate's handler never publishes again when
// nothing changes, does not show it.
func TestReleaseOfANodeNeverConfigured(t *testing.T) {
	u := begin(t, "nc", "nc-1", "nc-2", "nc-3")
	createPool(t, "cmp-nc", rangeSpec("10.70.0.0/24", "10.70.0.10", "10.70.0.30"))
	u.Hold(true)
	create(t, pooled("nc", "nc", "cmp-nc", "1"))
	Eventually(recorded("nc")).Should(HaveLen(3))
	Eventually(generated("nc")).Should(HaveLen(1))
	waiting := ""
	for _, n := range []string{"nc-3", "nc-2", "nc-1"} {
		if !slices.Contains(generated("nc")(), "nc-"+n) {
			waiting = n
			break
		}
	}
	ip := addressOf("nc", waiting)()
	relabel(waiting, "elsewhere")
	Eventually(addressOf("nc", waiting)).Should(BeEmpty())
	Eventually(bits("cmp-nc")).ShouldNot(ContainElement(ip), "free: the node never had it")
}

// TestNameTaken: a node whose policy name belongs to another NNCP (a
// per-node policy written by hand) is not configured, and the status says
// which and what to do; the other nodes are.
func TestNameTaken(t *testing.T) {
	begin(t, "nt", "nt-1", "nt-2")
	createPool(t, "cmp-nt", rangeSpec("10.71.0.0/24", "10.71.0.10", "10.71.0.30"))
	mine := envtest.StaticAddressPolicy("nt-nt-2", "nt-2", "10.71.0.99")
	Expect(k.Create(ctx, mine)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, mine) })
	create(t, pooled("nt", "nt", "cmp-nt", "100%"))
	Eventually(status("nt")).Should(And(HavePrefix("Degraded FailedToConfigure: the policy of node nt-2 would be nt-nt-2, which exists and belongs to no pooled policy"),
		HaveSuffix("(1/2 nodes successfully configured)")))
	Expect(generated("nt")()).To(ConsistOf("nt-nt-1"))
}

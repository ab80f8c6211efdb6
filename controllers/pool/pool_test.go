package pool_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// metric returns the value of a pool's gauge or counter.
func metric(registry *prometheus.Registry, name, pool string, labels ...string) func() float64 {
	want := map[string]string{"pool": pool}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		want[k] = v
	}
	return func() float64 {
		families, err := registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				matched := 0
				for _, l := range m.GetLabel() {
					if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
						matched++
					}
				}
				if matched == len(want) {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
}

func enactmentGone(name string) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k.Get(ctx, types.NamespacedName{Name: name}, &nncev1beta1.NodeNetworkConfigurationEnactment{}))
	}
}

// TestScaleDown is the specification's scale-down workflow, with a full
// pool: the node that joins last fails with ExhaustedIPPool on the pool;
// deleting a Node (its handler gone, as on a drained node) frees its
// address at once, without waiting for the quarantine period: the Node is
// gone, its network with it. The address is kept for the node's return,
// but the pool has no other, so the waiting node gets it and is told
// whose it was. The pool's metrics follow. A second node deleted has
// Events of its own on the pool.
func TestScaleDown(t *testing.T) {
	RegisterTestingT(t)
	metrics := pool.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	pc, err := env.StartPoolController(grace, metrics, func(pc *envtest.PoolController) { pc.Pools.QuarantinePeriod = time.Hour })
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	createPool(t, "down", ippoolv1.IPRange{CIDR: "10.5.0.0/24", Start: "10.5.0.1", End: "10.5.0.2"})
	Eventually(available("down")).Should(HavePrefix("True ReconciledPool"))
	createPolicy(t, "down", "down", "down")
	nodes := newNodes(t, "down", 2)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + ".down")).Should(HavePrefix("Available"))
	}
	assertIndexed("down")
	late := addNode(t, t.TempDir(), "down03", "down")
	Eventually(enactmentState("down03.down")).Should(ContainSubstring(`NodeIPPool "down" is exhausted`))
	Eventually(available("down")).Should(Equal("False ExhaustedIPPool: The IP pool has been depleted: 2 of 2 addresses are allocated and " +
		"down03 (policy down) could not get one; grow spec.range in place within its CIDR (an earlier start, a later end, fewer excludes: " +
		"every holder keeps its address), or free addresses; if the range already fills its CIDR, create a pool over a larger CIDR " +
		"and point the policies at it"))
	Eventually(events("NodeIPPool", "down")).Should(ContainElement(HavePrefix("ExhaustedIPPool: The IP pool has been depleted")))
	Eventually(metric(registry, "nmstate_ippool_allocated_addresses", "down")).Should(Equal(2.0))
	Expect(metric(registry, "nmstate_ippool_free_addresses", "down")()).To(Equal(0.0))
	Expect(metric(registry, "nmstate_ippool_size_addresses", "down")()).To(Equal(2.0))
	Eventually(metric(registry, "nmstate_ippool_waiting_holders", "down")).Should(Equal(1.0))
	Eventually(metric(registry, "nmstate_ippool_status_condition", "down",
		"type=Available", "status=False", "reason=ExhaustedIPPool")).Should(Equal(1.0))
	Expect(metric(registry, "nmstate_ippool_status_condition", "down", "type=Available", "status=True")()).To(Equal(-1.0),
		"a condition is exported only with its current status")

	freed := held("down01.down", "down")
	Expect(freed).To(HaveLen(1))
	Expect(nodes[0].Stop()).To(Succeed())
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down01"}})).To(Succeed())
	Eventually(enactmentGone("down01.down")).Should(BeTrue())
	Eventually(enactmentState(late.Name + ".down")).Should(HavePrefix("Available"))
	Expect(held("down03.down", "down")).To(Equal(freed))
	Eventually(available("down")).Should(HavePrefix("True ReconciledPool"))
	Eventually(metric(registry, "nmstate_ippool_waiting_holders", "down")).Should(Equal(0.0))
	Eventually(events("NodeIPPool", "down")).Should(ContainElement(
		"EnactmentRetired: Quarantined " + freed[0] + " held by enactment down01.down until node down01 no longer carries them: node down01 was deleted"))
	Eventually(events("NodeIPPool", "down")).Should(ContainElement(And(
		HavePrefix("QuarantineLifted: Freed quarantined "+freed[0]+" (node down01 is gone; kept for its return until "),
		Not(ContainSubstring("quarantine period")))))
	Eventually(events("NodeNetworkConfigurationEnactment", "down03.down")).Should(ContainElement(
		HavePrefix("AddressReclaimed: NodeIPPool down gave this enactment " + freed[0] + ", kept since ")))
	Expect(poolStatus("down").KeptForReturn).To(BeEmpty())
	Eventually(events("NodeNetworkConfigurationEnactment", "down01.down")).Should(ContainElement(
		"EnactmentRetired: Retired: node down01 was deleted; quarantined " + freed[0] + " of NodeIPPool down"))
	assertIndexed("down")

	// A second node's retirement and lift are told with Events of their
	// own: folded into the first node's series, which keeps its note,
	// they would name down01's address again.
	second := held("down02.down", "down")
	Expect(second).To(HaveLen(1))
	Expect(nodes[1].Stop()).To(Succeed())
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down02"}})).To(Succeed())
	Eventually(events("NodeIPPool", "down")).Should(ContainElements(
		"EnactmentRetired: Quarantined "+second[0]+" held by enactment down02.down until node down02 no longer carries them: node down02 was deleted",
		HavePrefix("QuarantineLifted: Freed quarantined "+second[0]+" (node down02 is gone; kept for its return until ")))
}

// TestScaleDownWhileControllerDown: a Node deleted while no pool
// controller runs is found when one starts.
func TestScaleDownWhileControllerDown(t *testing.T) {
	RegisterTestingT(t)
	stop := startController(t, nil)
	createPool(t, "offline", ippoolv1.IPRange{CIDR: "10.6.0.0/24"})
	Eventually(available("offline")).Should(HavePrefix("True"))
	createPolicy(t, "offline", "offline", "offline")
	nodes := newNodes(t, "offline", 2)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + ".offline")).Should(HavePrefix("Available"))
	}
	kept := held("offline02.offline", "offline")
	stop()
	Expect(nodes[0].Stop()).To(Succeed())
	Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "offline01"}})).To(Succeed())
	Consistently(enactmentGone("offline01.offline"), 2*time.Second).Should(BeFalse(), "nothing retires it while the controller is down")

	startController(t, nil)
	Eventually(enactmentGone("offline01.offline")).Should(BeTrue())
	Eventually(func() []string { return bits("offline") }).Should(Equal(kept))
	assertIndexed("offline")
}

// TestResetScopes is the specification's manual clean-up: a reset on an
// enactment drops that enactment's addresses only, one on a policy those of
// its enactments only, one on the pool drops nothing; each annotation is
// removed when done, and the handlers allocate again.
func TestResetScopes(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	// A placeholder holds the first address, so that a dropped enactment
	// visibly moves to it once the placeholder is gone.
	claim(t, "ghost", "scopes", "10.8.0.1")
	createPool(t, "scopes", ippoolv1.IPRange{CIDR: "10.8.0.0/24", Start: "10.8.0.1", End: "10.8.0.20"})
	Eventually(available("scopes")).Should(HavePrefix("True"))
	createPolicy(t, "scope-a", "scopes", "scopes")
	createPolicy(t, "scope-b", "scopes", "scopes")
	newNodes(t, "scopes", 2)
	all := []string{"scopes01.scope-a", "scopes02.scope-a", "scopes01.scope-b", "scopes02.scope-b"}
	before := map[string][]string{}
	for _, name := range all {
		Eventually(enactmentState(name)).Should(HavePrefix("Available"))
		before[name] = held(name, "scopes")
	}
	deleteObject(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}})
	Eventually(func() []string { return bits("scopes") }).ShouldNot(ContainElement("10.8.0.1"), "collected after the grace period")

	nnce := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "scopes01.scope-a"}}
	annotate(nnce, "scopes")
	Eventually(annotated(nnce)).Should(BeFalse())
	Eventually(func() []string { return held("scopes01.scope-a", "scopes") }).Should(Equal([]string{"10.8.0.1"}), func() string { s := poolStatus("scopes"); return fmt.Sprintf("%+v %v", s, bits("scopes")) })
	Eventually(enactmentState("scopes01.scope-a")).Should(HavePrefix("Available"))
	Eventually(events("NodeNetworkConfigurationEnactment", "scopes01.scope-a")).Should(ContainElement(
		"AddressesDropped: Dropped " + before["scopes01.scope-a"][0] + " of NodeIPPool scopes for the nmstate.io/reset-ippool annotation; the handler allocates again"))
	for _, name := range all[1:] {
		Expect(held(name, "scopes")).To(Equal(before[name]), name)
	}
	// One reset, one drop: acting again on an annotation the cache still
	// shows would take the new address too.
	Consistently(events("NodeNetworkConfigurationEnactment", "scopes01.scope-a"), 2*time.Second).Should(HaveLen(1))
	Expect(held("scopes01.scope-a", "scopes")).To(Equal([]string{"10.8.0.1"}))
	// The audit trail says who lost which address, why, and on what
	// evidence it was freed, and that the holder recorded each address:
	// the Events of one reason on one holder are kept apart by address
	// (audit.AddressReference), not folded into the first one's series.
	old := before["scopes01.scope-a"][0]
	Eventually(auditEvents("NodeNetworkConfigurationEnactment", "scopes01.scope-a")).Should(ContainElements(
		"AddressQuarantined: "+old+" of NodeIPPool scopes quarantined, holder enactment scopes01.scope-a on node scopes01: Reset "+
			"(its record of NodeIPPool scopes is dropped; the node is given a new address)",
		"AddressLifted: "+old+" of NodeIPPool scopes lifted, holder enactment scopes01.scope-a on node scopes01: QuarantineLifted (node scopes01 showed it gone)",
		HavePrefix("AddressRecorded: "+old+" of NodeIPPool scopes recorded, holder enactment scopes01.scope-a"),
		HavePrefix("AddressRecorded: 10.8.0.1 of NodeIPPool scopes recorded, holder enactment scopes01.scope-a")))

	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "scope-b"}}
	annotate(policy, "scopes")
	Eventually(annotated(policy)).Should(BeFalse())
	for _, name := range all[2:] {
		Eventually(events("NodeNetworkConfigurationEnactment", name)).Should(ContainElement(HavePrefix("AddressesDropped: Dropped " + before[name][0])))
		Eventually(enactmentState(name)).Should(HavePrefix("Available"))
	}
	Expect(events("NodeNetworkConfigurationEnactment", "scopes02.scope-a")()).To(BeEmpty(), "outside the policy's scope")
	Expect(held("scopes02.scope-a", "scopes")).To(Equal(before["scopes02.scope-a"]))

	afterPolicy := map[string][]string{}
	for _, name := range all {
		afterPolicy[name] = held(name, "scopes")
	}
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "scopes"}}
	annotate(p, "")
	Eventually(annotated(p)).Should(BeFalse())
	Eventually(available("scopes")).Should(HavePrefix("True ReconciledPool"))
	for _, name := range all {
		Expect(held(name, "scopes")).To(Equal(afterPolicy[name]), "a pool reset keeps every address")
	}
	assertIndexed("scopes")
}

// TestInvalidResets: a reset annotation that names no pool is removed with
// a Warning that says what to write, and changes nothing else.
func TestInvalidResets(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "valid", ippoolv1.IPRange{CIDR: "10.9.0.0/24"})
	claim(t, "n1.invalid", "valid", "10.9.0.5")
	Eventually(available("valid")).Should(HavePrefix("True"))
	nnce := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "n1.invalid"}}
	annotate(nnce, "no-such-pool")
	Eventually(annotated(nnce)).Should(BeFalse())
	Eventually(events("NodeNetworkConfigurationEnactment", "n1.invalid")).Should(ContainElement(
		`InvalidReset: Ignored and removed the nmstate.io/reset-ippool annotation: it names NodeIPPool "no-such-pool", which does not exist. ` +
			`Name the pool to reset: kubectl annotate nnce n1.invalid nmstate.io/reset-ippool=<pool>`))
	annotate(nnce, "")
	Eventually(annotated(nnce)).Should(BeFalse())
	Eventually(events("NodeNetworkConfigurationEnactment", "n1.invalid")).Should(ContainElement(HavePrefix(
		`InvalidReset: Ignored and removed the nmstate.io/reset-ippool annotation: it is empty.`)))
	Expect(held("n1.invalid", "valid")).To(Equal([]string{"10.9.0.5"}))
	Expect(bits("valid")).To(Equal([]string{"10.9.0.5"}))
}

// TestGarbageCollection: a bit nobody claims, written by a vouched writer
// (a retirer that died before quarantining), survives an immediate rebuild
// and is freed only after the grace period; a claimed bit is never freed,
// across rebuilds and long after the grace period.
func TestGarbageCollection(t *testing.T) {
	RegisterTestingT(t)
	metrics := pool.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	startController(t, metrics)
	createPool(t, "gc", ippoolv1.IPRange{CIDR: "10.2.0.0/24"})
	Eventually(available("gc")).Should(HavePrefix("True"))
	claim(t, "n1.gc", "gc", "10.2.0.4")
	writeBits("gc", "10.2.0.4", "10.2.0.9")
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "gc"}}
	annotate(p, "")
	Eventually(annotated(p)).Should(BeFalse())
	Expect(bits("gc")).To(Equal([]string{"10.2.0.4", "10.2.0.9"}), "a rebuild never clears a bit")

	Eventually(func() []string { return bits("gc") }).Should(Equal([]string{"10.2.0.4"}))
	Eventually(events("NodeIPPool", "gc")).Should(ContainElement(
		"GarbageCollected: Freed 10.2.0.9: allocated for longer than 3s but recorded by no holder and on no node's network"))
	Expect(metric(registry, "nmstate_ippool_garbage_collected_addresses_total", "gc")()).To(Equal(1.0))
	Expect(metric(registry, "nmstate_ippool_rebuilds_total", "gc")()).To(BeNumerically(">=", 2))
	Expect(metric(registry, "nmstate_ippool_status_writes_total", "gc")()).To(BeNumerically(">=", 3))
	Expect(metric(registry, "nmstate_ippool_rebuild_failures_total", "gc")()).To(Equal(0.0), "exported at zero")
	Expect(metric(registry, "nmstate_ippool_garbage_collection_failures_total", "gc")()).To(Equal(0.0), "exported at zero")
	annotate(p, "")
	Eventually(annotated(p)).Should(BeFalse())
	Consistently(func() []string { return bits("gc") }, 2*grace).Should(Equal([]string{"10.2.0.4"}))
}

// TestIndexRepaired is the specification's last resort: an admin who
// empties status.allocatedOffsets gets the pool rebuilt from the
// enactments, not a pool that hands out addresses in use.
func TestIndexRepaired(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "repair", ippoolv1.IPRange{CIDR: "10.10.0.0/24"})
	claim(t, "n1.repair", "repair", "10.10.0.1", "10.10.0.2")
	Eventually(func() []string { return bits("repair") }).Should(Equal([]string{"10.10.0.1", "10.10.0.2"}))
	setBits("repair")
	Eventually(func() []string { return bits("repair") }).Should(Equal([]string{"10.10.0.1", "10.10.0.2"}))
	Eventually(events("NodeIPPool", "repair")).Should(ContainElement(
		"UnvouchedStatus: Rebuilt from the holders' records: status.allocatedOffsets, inFlight or quarantined had been changed by someone other than " +
			"the pool controller and the handlers (its stamp did not match), so only recorded, in-flight and quarantined addresses were kept"))
	Eventually(available("repair")).Should(HavePrefix("True ReconciledPool"))
}

// TestStartupRebuild: a claim recorded while no controller ran is indexed
// when one starts.
func TestStartupRebuild(t *testing.T) {
	RegisterTestingT(t)
	createIdlePool(t, "startup", "10.3.0.0/24")
	claim(t, "n1.startup", "startup", "10.3.0.7")
	Expect(bits("startup")).To(BeEmpty())
	startController(t, nil)
	Eventually(func() []string { return bits("startup") }).Should(Equal([]string{"10.3.0.7"}))
	Eventually(available("startup")).Should(HavePrefix("True ReconciledPool"))
}

// TestOverlapAndCollision: the newer of two overlapping pools is refused
// naming the older; an address held by two enactments is reported with
// both nodes and interfaces.
func TestOverlapAndCollision(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "older", ippoolv1.IPRange{CIDR: "10.4.0.0/24", Start: "10.4.0.1", End: "10.4.0.20"})
	Eventually(available("older")).Should(HavePrefix("True"))
	// creationTimestamp has a resolution of one second; within one second
	// the name decides, and "newer" sorts first.
	laterSecond(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "older"}})
	createPool(t, "newer", ippoolv1.IPRange{CIDR: "10.4.0.0/16", Start: "10.4.0.20", End: "10.4.1.20"})
	Eventually(available("newer")).Should(Equal("False OverlappingIPPool: The NodeIPPool older is overlapping with this one; " +
		"move this pool's start and end in place outside older's range, or delete this pool"))
	Eventually(events("NodeIPPool", "newer")).Should(ContainElement(HavePrefix("OverlappingIPPool: The NodeIPPool older")))
	Consistently(available("older"), time.Second).Should(HavePrefix("True"))

	deleteObject(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "older"}})
	Eventually(available("newer")).Should(HavePrefix("True ReconciledPool"))

	// The policy selects no node, so no handler acts on the enactments.
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "newer"}}
	p.Spec.NodeSelector = map[string]string{"role": "nobody"}
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
	collide(t, "n1", "eth1")
	collide(t, "n2", "eth2")
	Eventually(available("newer")).Should(Equal("False IPCollision: The IP address 10.4.0.30 at node n1 and interface eth1 " +
		"(enactment n1.newer) is colliding with node n2 and interface eth2 (enactment n2.newer); " +
		"reset all but one holder, e.g. kubectl annotate nnce n2.newer nmstate.io/reset-ippool=newer"))
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "n2.newer"}}, "newer")
	Eventually(available("newer")).Should(HavePrefix("True ReconciledPool"))
	Expect(held("n2.newer", "newer")).To(BeEmpty())
	Expect(bits("newer")).To(Equal([]string{"10.4.0.30"}), "the remaining holder keeps its bit")
}

// collide makes the enactment node.newer of a Node without a handler
// record 10.4.0.30 on iface.
func collide(t *testing.T, node, iface string) {
	Expect(k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
	name := node + ".newer"
	claim(t, name, "newer", "10.4.0.30")
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	Eventually(func() error {
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &e); err != nil {
			return err
		}
		e.Labels = map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: "newer"}
		return k.Update(ctx, &e)
	}).Should(Succeed())
	Eventually(func() error {
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &e); err != nil {
			return err
		}
		e.Status.DesiredState.Raw = []byte(strings.ReplaceAll("interfaces:\n- name: IF\n  ipv4:\n    address:\n    - ip: 10.4.0.30\n", "IF", iface))
		return k.Status().Update(ctx, &e)
	}).Should(Succeed())
}

// failingLists fails the first lists of enactments, whole or as
// metadata, as an overloaded API server would.
type failingLists struct {
	client.Reader
	failures atomic.Int32
}

func (f *failingLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	_, whole := list.(*nncev1beta1.NodeNetworkConfigurationEnactmentList)
	metas, ok := list.(*metav1.PartialObjectMetadataList)
	metadata := ok && metas.GroupVersionKind().Kind == "NodeNetworkConfigurationEnactmentList"
	if (whole || metadata) && f.failures.Add(-1) >= 0 {
		return errors.New("etcdserver: request timed out (injected)")
	}
	return f.Reader.List(ctx, list, opts...)
}

// TestFailedRebuild: a rebuild that cannot read the enactments leaves the
// pool UnsyncronizedIPPool, saying why, and is retried until it succeeds.
func TestFailedRebuild(t *testing.T) {
	RegisterTestingT(t)
	reader := &failingLists{}
	reader.failures.Store(3)
	metrics := pool.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	pc, err := env.StartPoolController(grace, metrics, func(pc *envtest.PoolController) {
		reader.Reader = pc.Pools.APIReader
		pc.Pools.APIReader = reader
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	createPool(t, "unsync", ippoolv1.IPRange{CIDR: "10.11.0.0/24"})
	Eventually(available("unsync")).Should(HavePrefix("True ReconciledPool"))
	Eventually(events("NodeIPPool", "unsync")).Should(ContainElement("UnsyncronizedIPPool: Failed re constructing the IP pool, it may be " +
		"not in sync with nodes: list enactments: etcdserver: request timed out (injected); the controller retries"))
	Expect(reader.failures.Load()).To(BeNumerically("<", 0))
	Expect(metric(registry, "nmstate_ippool_rebuild_failures_total", "unsync")()).To(BeNumerically(">=", 1))
	Expect(metric(registry, "nmstate_ippool_rebuilds_total", "unsync")()).To(BeNumerically(">=", 1))
}

// staleCache shows the reset annotation on one enactment forever, as a
// cache that never sees its removal would.
type staleCache struct {
	client.Client
	enactment, pool string
}

func (s *staleCache) stale(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
	if e.Name == s.enactment {
		e.Annotations = map[string]string{ippoolv1.ResetIPPoolAnnotation: s.pool}
	}
}

func (s *staleCache) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	err := s.Client.Get(ctx, key, o, opts...)
	if e, ok := o.(*nncev1beta1.NodeNetworkConfigurationEnactment); ok && err == nil {
		s.stale(e)
	}
	return err
}

func (s *staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := s.Client.List(ctx, list, opts...)
	if l, ok := list.(*nncev1beta1.NodeNetworkConfigurationEnactmentList); ok && err == nil {
		for i := range l.Items {
			s.stale(&l.Items[i])
		}
	}
	return err
}

// TestResetIgnoresStaleCache: a reset is acted on once, even if the cache
// goes on showing its annotation after the controller removed it; acting
// again would take away the address the handler has just allocated anew.
func TestResetIgnoresStaleCache(t *testing.T) {
	RegisterTestingT(t)
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Pools.Client = &staleCache{Client: pc.Pools.Client, enactment: "stale01.stale", pool: "stale"}
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	createPool(t, "stale", ippoolv1.IPRange{CIDR: "10.12.0.0/24", Start: "10.12.0.1", End: "10.12.0.20"})
	Eventually(available("stale")).Should(HavePrefix("True"))
	createPolicy(t, "stale", "stale", "stale")
	newNodes(t, "stale", 1)
	Eventually(enactmentState("stale01.stale")).Should(HavePrefix("Available"))

	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "stale01.stale"}}
	annotate(e, "stale")
	Eventually(annotated(e)).Should(BeFalse())
	Eventually(events("NodeNetworkConfigurationEnactment", "stale01.stale")).Should(HaveLen(1))
	Eventually(enactmentState("stale01.stale")).Should(HavePrefix("Available"))
	Consistently(events("NodeNetworkConfigurationEnactment", "stale01.stale"), 3*time.Second).Should(HaveLen(1))
	Expect(held("stale01.stale", "stale")).To(HaveLen(1))
}

package claim_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestNodesAndClaimsRace: real handlers of a pooled policy and claims ask
// one small pool at once; every address goes to one holder, the bitmap
// holds exactly the addresses handed out, and a released claim's address
// goes to a node that joins later only once nothing carries it.
func TestNodesAndClaimsRace(t *testing.T) {
	pc := begin(t, "race", "claims-race", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.81.0.0/24", Start: "10.81.0.1", End: "10.81.0.10"}})
	dir := t.TempDir()
	const nodes, claims = 5, 5
	holders := func() map[string][]string {
		out := map[string][]string{}
		for i := range nodes + 1 {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			name := fmt.Sprintf("race%02d.race", i+1)
			if k.Get(ctx, types.NamespacedName{Name: name}, &e) == nil {
				for _, ip := range e.Status.IPPool["claims-race"].Allocated {
					out[ip] = append(out[ip], name)
				}
			}
		}
		for i := range claims {
			if a, err := getAddress("race", fmt.Sprintf("m%d", i+1)); err == nil {
				ip := capi.AddressOf(a).IP.String()
				out[ip] = append(out[ip], fmt.Sprintf("claim m%d", i+1))
			}
		}
		return out
	}
	for i := range nodes {
		addNode(t, dir, fmt.Sprintf("race%02d", i+1))
	}
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "race"}}
	policy.Spec.NodeSelector = map[string]string{"role": "race"}
	policy.Spec.Capture = map[string]string{"addr": "ippool.claims-race.allocate"}
	policy.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	Expect(k.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, policy) })
	for i := range claims {
		createClaim(t, "race", fmt.Sprintf("m%d", i+1), "claims-race")
	}

	Eventually(func() int { return len(holders()) }, 2*defaultTimeout).Should(Equal(nodes + claims))
	all := holders()
	for ip, who := range all {
		Expect(who).To(HaveLen(1), "%s is held by %v", ip, who)
	}
	var ips []string
	for ip := range all {
		ips = append(ips, ip)
	}
	Eventually(bits("claims-race")).Should(ConsistOf(ips))
	Expect(available("claims-race")()).To(HavePrefix("True"))

	// Claim m1's machine joined as node racemachine, whose state shows its
	// address; the claim is deleted while the pool is full.
	released := addressOf("race", "m1")()
	publishState(t, pc, "racemachine", fmt.Sprintf(`{"interfaces":[{"name":"eth0","ipv4":{"address":[{"ip":%q,"prefix-length":24}]}}]}`, released),
		time.Now())
	machine := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "racemachine"}}
	Expect(k.Create(ctx, machine)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, machine) })
	Expect(k.Delete(ctx, newClaim("race", "m1", "claims-race"))).To(Succeed())
	Eventually(quarantined("claims-race")).Should(Equal([]string{released + " racemachine"}))

	// A node that joins is not given the address while the machine carries it.
	addNode(t, dir, "race06")
	Eventually(func() string {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: "race06.race"}, &e); err != nil {
			return err.Error()
		}
		return e.Status.WaitingForIPPool
	}).Should(Equal("claims-race"))
	Consistently(func() []string { return holders()[released] }, 2*grace).Should(BeEmpty())

	// The machine shows the address gone: the node gets it.
	publishState(t, pc, "racemachine", `{"interfaces":[{"name":"eth0"}]}`, time.Now().Add(time.Minute))
	Eventually(func() []string { return holders()[released] }).Should(Equal([]string{"race06.race"}))
}

// addNode creates a Node labelled role=race and starts its handler.
func addNode(t *testing.T, dir, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "race"}}}
	Expect(k.Create(ctx, node)).To(Succeed())
	nd := envtest.NewNode(name, dir, simBin)
	Expect(nd.Start(env)).To(Succeed())
	t.Cleanup(func() {
		_ = nd.Stop()
		_ = k.Delete(ctx, node)
	})
}

// TestStalledClaimKeepsItsAddress: a claim's pass that stalls between its
// pool write and the creation of its IPAddress for longer than the grace
// period (a slow admission webhook, an API server under load) keeps the
// address it took; a node asking the one-address pool meanwhile waits.
// Before, the claim's in-flight entry was forgotten, garbage collection
// freed the address, the node got it, and the late IPAddress named it too.
func TestStalledClaimKeepsItsAddress(t *testing.T) {
	var stall atomic.Bool
	stall.Store(true)
	// Long enough for the entry to be forgotten, the address collected and
	// the waiting node nudged and served, had the entry not held it.
	startStalling(t, 8*grace, func() bool { return stall.Swap(false) }, func() bool { return false })
	createNamespace(t, "stall")
	createPool(t, "claims-stall", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.13.0/24", Start: "10.80.13.1", End: "10.80.13.1"}})
	createClaim(t, "stall", "m1", "claims-stall")
	Eventually(bits("claims-stall")).Should(Equal([]string{"10.80.13.1"}), "taken for m1, its IPAddress not created yet")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stall01", Labels: map[string]string{"role": "stall"}}}
	Expect(k.Create(ctx, node)).To(Succeed())
	nd := envtest.NewNode("stall01", t.TempDir(), simBin)
	Expect(nd.Start(env)).To(Succeed())
	t.Cleanup(func() {
		_ = nd.Stop()
		_ = k.Delete(ctx, node)
	})
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "stall"}}
	policy.Spec.NodeSelector = map[string]string{"role": "stall"}
	policy.Spec.Capture = map[string]string{"addr": "ippool.claims-stall.allocate"}
	policy.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	Expect(k.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, policy) })

	nodeHolds := func() []string {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := k.Get(ctx, types.NamespacedName{Name: "stall01.stall"}, &e); err != nil {
			return nil
		}
		return e.Status.IPPool["claims-stall"].Allocated
	}
	Eventually(addressOf("stall", "m1"), 2*defaultTimeout).Should(Equal("10.80.13.1"))
	Consistently(nodeHolds, 2*grace).Should(BeEmpty(), "the node waits for a free address")
	Expect(bits("claims-stall")()).To(Equal([]string{"10.80.13.1"}))
}

// TestClaimsPassByCarriedAddresses: an address a node's network carries
// though no record holds it (its state published after the pool's
// rebuild, as after a restore) is given to no claim: a claim gets the
// next one, a claim that asks for it by annotation is refused, naming the
// node, and a claim that finds only such addresses left is told so.
func TestClaimsPassByCarriedAddresses(t *testing.T) {
	const pool = "claims-carried"
	pc := begin(t, "carried", pool, ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.41.0/24", Start: "10.80.41.1", End: "10.80.41.2"}})
	carrier := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "carrier01"}}
	Expect(k.Create(ctx, carrier)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, carrier) })
	publishState(t, pc, "carrier01", `{"interfaces":[{"name":"eth1","ipv4":{"address":[{"ip":"10.80.41.1","prefix-length":24}]}}]}`, time.Now())

	createClaim(t, "carried", "m1", pool)
	Eventually(addressOf("carried", "m1")).Should(Equal("10.80.41.2"), "not 10.80.41.1, which carrier01 carries")
	createClaim(t, "carried", "m2", pool, func(c *unstructured.Unstructured) {
		c.SetAnnotations(map[string]string{capi.RequestedAddressAnnotation: "10.80.41.1"})
	})
	Eventually(readiness("carried", "m2")).Should(HavePrefix("False AllocationFailed: annotation ipAddress=10.80.41.1: " +
		"on the network of node carrier01 (its NodeNetworkState shows it), though no holder records it"))
	createClaim(t, "carried", "m3", pool)
	Eventually(readiness("carried", "m3")).Should(Equal("False PoolExhausted: NodeIPPool claims-carried has no address left " +
		"for this claim (1 of 2 allocated; 1 more are carried by nodes' networks and recorded by no holder); the claim is served as " +
		"soon as one is freed, or grow the pool's range"))
	Expect(bits(pool)()).To(Equal([]string{"10.80.41.2"}))

	// m2 is withdrawn (it would take 10.80.41.1 once free, as it asks),
	// then the node lets the address go: it writes only its state, no
	// pool, and the waiting claim, looked at again while only carried
	// addresses are left, gets it with nothing else changed.
	Expect(k.Delete(ctx, newClaim("carried", "m2", pool))).To(Succeed())
	Eventually(func() error {
		return k.Get(ctx, client.ObjectKeyFromObject(newClaim("carried", "m2", pool)), newClaim("carried", "m2", pool))
	}).Should(MatchError(ContainSubstring("not found")))
	publishState(t, pc, "carrier01", `{"interfaces":[{"name":"eth1","ipv4":{"address":[]}}]}`, time.Now())
	Eventually(addressOf("carried", "m3")).Should(Equal("10.80.41.1"))
}

package pool_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// carryingNode adds a node whose network already carries ip on eth1 (as a
// per-node policy left it), or nothing when ip is "".
func carryingNode(t *testing.T, dir, name, role, ip string, selfAllocate bool) *envtest.Node {
	t.Helper()
	return addNodeWith(t, dir, name, role, func(nd *envtest.Node) {
		nd.SelfAllocate = selfAllocate
		if ip == "" {
			return
		}
		state := fmt.Sprintf("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  ipv4:\n    enabled: true\n    dhcp: false\n"+
			"    address:\n    - ip: %s\n      prefix-length: 24\n", ip)
		Expect(nd.Network.Runner.Apply(ctx, []byte(state))).To(Succeed())
		Expect(nd.Network.Runner.Commit(ctx)).To(Succeed())
	})
}

// statePublishedAfter reports whether the node's NodeNetworkState was
// written after at.
func statePublishedAfter(node string, at time.Time) func() bool {
	return func() bool {
		var nns nncev1beta1.NodeNetworkState
		return k.Get(ctx, types.NamespacedName{Name: node}, &nns) == nil && nns.Status.LastSuccessfulUpdateTime.After(at)
	}
}

// TestAdoptCarriedAddresses: nodes that carry static addresses on eth1
// (typed into one policy per node) get a pool and one pooled policy for
// eth1. Each keeps the address it carries, with no moment without it; a
// node whose address the pool cannot give it is told why and gets a new
// one; a node that carries nothing gets a new one. The pool controller
// chooses for handlers that ask (the default), and a handler that
// allocates itself (--self-allocate) chooses the same.
func TestAdoptCarriedAddresses(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, time.Minute)
	for i, selfAllocate := range []bool{false, true} {
		t.Run(fmt.Sprintf("self-allocate=%v", selfAllocate), func(t *testing.T) {
			adoptCarried(t, fmt.Sprintf("adopt%d", i), fmt.Sprintf("10.9%d.0", i), selfAllocate)
		})
	}
}

// adoptCarried runs TestAdoptCarriedAddresses with nodes, pool and policy
// called name, in the /24 of net (a range of its own: the nodes'
// NodeNetworkStates outlive the test, and would carry into another
// test's pool).
func adoptCarried(t *testing.T, name, net string, selfAllocate bool) {
	RegisterTestingT(t)
	dir := t.TempDir()
	node := func(i int) string { return fmt.Sprintf("%s-%02d", name, i) }
	carriers := map[string]string{node(1): net + ".43", node(2): net + ".46", node(3): net + ".5", node(4): ""}
	var nodes []*envtest.Node
	for i := 1; i <= 4; i++ {
		nodes = append(nodes, carryingNode(t, dir, node(i), name, carriers[node(i)], selfAllocate))
	}
	for n, ip := range carriers {
		if ip != "" {
			Eventually(func() bool { return strings.Contains(nodeStateOf(n), ip) }).Should(BeTrue(), "the state of %s", n)
		}
	}
	nics := envtest.SampleNICs(t, nodes...)
	nics.MustKeep(node(1), netip.MustParseAddr(net+".43"))
	nics.MustKeep(node(2), netip.MustParseAddr(net+".46"))

	createPool(t, name, ippoolv1.IPRange{CIDR: net + ".0/24", Start: net + ".2", End: net + ".100", Exclude: []string{net + ".5"}})
	Eventually(available(name)).Should(HavePrefix("True"))
	// The pool holds what the nodes carry for them; asked for evidence,
	// the nodes publish their state, and take nothing off: no record
	// released those addresses.
	Expect(bits(name)).To(Equal([]string{net + ".43", net + ".46"}))
	Eventually(func() bool {
		q := poolstatus.QuarantineOf(&ippoolv1.NodeIPPool{Status: poolStatus(name)}, net+".43")
		return q != nil && q.StateSeenAtRelease != nil && statePublishedAfter(node(1), q.StateSeenAtRelease.Time)()
	}).Should(BeTrue(), "node %s asked for its state, and publishing one", node(1))
	Expect(carried(nodes[0])()).To(Equal([]string{net + ".43/24"}))

	createPolicy(t, name, name, name)
	for n := range carriers {
		Eventually(enactmentState(n+"."+name)).Should(HavePrefix("Available"), n)
	}
	Expect(held(node(1)+"."+name, name)).To(Equal([]string{net + ".43"}))
	Expect(held(node(2)+"."+name, name)).To(Equal([]string{net + ".46"}))
	// The two others get the lowest free addresses, in the order they
	// ask.
	third, fourth := held(node(3)+"."+name, name), held(node(4)+"."+name, name)
	Expect(append(third, fourth...)).To(ConsistOf(net+".2", net+".3"))
	Expect(carried(nodes[0])()).To(Equal([]string{net + ".43/24"}))
	Expect(carried(nodes[2])()).To(Equal([]string{third[0] + "/24"}))
	Eventually(events("NodeNetworkConfigurationEnactment", node(1)+"."+name)).Should(ContainElement(
		"AddressAdopted: NodeIPPool " + name + " adopted " + net + ".43 on eth1: the node already carried it, so its network does not change"))
	notAdopted := "NodeIPPool " + name + " could not adopt what the node carries: " + net + ".5 on eth1 (it is excluded from the range " +
		net + ".2-" + net + ".100)"
	Eventually(events("NodeNetworkConfigurationEnactment", node(3)+"."+name)).Should(ContainElement(HavePrefix("AddressNotAdopted: " + notAdopted)))
	Expect(enactmentState(node(3) + "." + name)()).To(ContainSubstring("could not adopt what the node carried: " + net + ".5 on eth1 (it is excluded"))
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &p)).To(Succeed())
	Expect(p.Status.Quarantined).To(BeEmpty(), "the adopted addresses are no longer held apart")
	assertIndexed(name)
	Expect(nics.WithoutAddress()).To(BeEmpty())
	Expect(nics.OnTwoNICs()).To(BeEmpty())
}

// TestSelfAllocatingNodesPassCarriedAddresses: a node comes to carry a
// free address of a pool that no holder records (set by hand, or applied
// after the backup the pool was restored from). With
// --hold-carried-addresses, the pool controller quarantines it for that
// node as soon as the node publishes its state, with an Event; a
// self-allocating handler of another node, which does not look at what
// other nodes carry, then takes the next free address, not that one, and the node
// that carries it adopts it. A second carrier's hold has its own Event.
func TestSelfAllocatingNodesPassCarriedAddresses(t *testing.T) {
	RegisterTestingT(t)
	startHoldingCarried(t, 0)
	const name = "held"
	createPool(t, name, ippoolv1.IPRange{CIDR: "10.95.0.0/24", Start: "10.95.0.2", End: "10.95.0.20"})
	Eventually(available(name)).Should(HavePrefix("True"))

	dir := t.TempDir()
	// The lowest free address: what any writer that does not know the
	// node carries it would hand out first.
	carrier := carryingNode(t, dir, "held-01", name, "10.95.0.2", true)
	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus(name).Quarantined }).Should(ConsistOf(
		And(HaveField("IP", "10.95.0.2"), HaveField("Node", "held-01"), HaveField("HolderName()", ""))))
	Expect(bits(name)).To(Equal([]string{"10.95.0.2"}))
	Eventually(events("NodeIPPool", name)).Should(ContainElement(HavePrefix(
		"AddressQuarantined: Held 10.95.0.2 on node held-01: free in the pool and recorded by no holder, so only the node that carries it adopts it")))
	// Another node's hold on the same pool is said too: Events of two
	// nodes on the one pool, with one reason, would otherwise fold into
	// one series that keeps the first node's note only.
	carryingNode(t, dir, "held-03", "not-"+name, "10.95.0.4", true)
	Eventually(events("NodeIPPool", name)).Should(ContainElements(
		HavePrefix("AddressQuarantined: Held 10.95.0.2 on node held-01:"),
		HavePrefix("AddressQuarantined: Held 10.95.0.4 on node held-03:")))

	other := carryingNode(t, dir, "held-02", name, "", true)
	nics := envtest.SampleNICs(t, carrier, other)
	createPolicy(t, name, name, name)
	Eventually(enactmentState("held-02." + name)).Should(HavePrefix("Available"))
	Eventually(enactmentState("held-01." + name)).Should(HavePrefix("Available"))
	Expect(held("held-02."+name, name)).To(Equal([]string{"10.95.0.3"}))
	Expect(held("held-01."+name, name)).To(Equal([]string{"10.95.0.2"}))
	Expect(poolStatus(name).Quarantined).To(ConsistOf(And(HaveField("IP", "10.95.0.4"), HaveField("Node", "held-03"))),
		"10.95.0.2 adopted by the node that carries it, 10.95.0.4 still held for a node outside the policy")
	assertIndexed(name)
	Expect(nics.OnTwoNICs()).To(BeEmpty())
}

// TestAddressMovedByHandIsHeldForItsNewCarrier: an admin sets node
// moved-b's address on node moved-a by hand, then removes moved-b's
// policy. moved-b's release is confirmed and its quarantine lifted; with
// --hold-carried-addresses the address is then held for moved-a, which
// carries it, instead of freed for the next node that asks (moved-a
// published its state while the address was still moved-b's, so nothing
// else looks at it again).
func TestAddressMovedByHandIsHeldForItsNewCarrier(t *testing.T) {
	RegisterTestingT(t)
	startHoldingCarried(t, 0)
	const name = "moved"
	createPool(t, name, ippoolv1.IPRange{CIDR: "10.94.0.0/24", Start: "10.94.0.2", End: "10.94.0.20"})
	Eventually(available(name)).Should(HavePrefix("True"))
	dir := t.TempDir()
	addNode(t, dir, "moved-b", name)
	policy := createPolicyWith(t, name, name, map[string]string{"addr": "ippool." + name + ".allocate"}, envtest.OneAddressState)
	Eventually(enactmentState("moved-b." + name)).Should(HavePrefix("Available"))
	Expect(held("moved-b."+name, name)).To(Equal([]string{"10.94.0.2"}))

	carryingNode(t, dir, "moved-a", "not-"+name, "10.94.0.2", false)
	Eventually(func() string { return nodeStateOf("moved-a") }).Should(ContainSubstring("10.94.0.2"))
	deleteObject(policy)
	Eventually(func() []ippoolv1.QuarantinedAddress { return poolStatus(name).Quarantined }).Should(ConsistOf(
		And(HaveField("IP", "10.94.0.2"), HaveField("Node", "moved-a"), HaveField("HolderName()", ""))))
	Expect(bits(name)).To(Equal([]string{"10.94.0.2"}))
	Eventually(events("NodeIPPool", name)).Should(ContainElement(HavePrefix(
		"AddressQuarantined: Held 10.94.0.2 on node moved-a instead of freeing it")))
}

// TestTemplateErrorsHoldNoAddress: a pooled policy whose template reads
// the gateway of a pool that sets none fails at once with a message that
// names the capture, the field and the fix, and holds no address; once
// the pool sets a gateway, it is served.
func TestTemplateErrorsHoldNoAddress(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, time.Minute)
	addNode(t, t.TempDir(), "tmpl01", "tmpl")
	createPool(t, "tmpl", ippoolv1.IPRange{CIDR: "10.92.0.0/24", Start: "10.92.0.2", End: "10.92.0.9"})
	Eventually(available("tmpl")).Should(HavePrefix("True"))
	policy := createPolicyWith(t, "tmpl", "tmpl", map[string]string{"addr": "ippool.tmpl.allocate"}, envtest.OneAddressState+
		"routes:\n  config:\n  - destination: 0.0.0.0/0\n    next-hop-address: \"{{ capture.addr.gateway }}\"\n    next-hop-interface: eth1\n")
	Eventually(enactmentState("tmpl01.tmpl")).Should(Equal("Failing: the desired state cannot be rendered: the template reads " +
		"{{ capture.addr.gateway }}, but NodeIPPool tmpl sets no spec.gateway (which a pool cannot gain once created): " +
		"draw the capture from a pool that sets spec.gateway, or remove the reference from the policy"))
	Consistently(func() []string { return bits("tmpl") }, 2*time.Second).Should(BeEmpty())

	// Fixed, the policy is served.
	setDesiredState(policy, envtest.OneAddressState)
	Eventually(enactmentState("tmpl01.tmpl"), time.Minute).Should(HavePrefix("Available"))
	Expect(held("tmpl01.tmpl", "tmpl")).To(Equal([]string{"10.92.0.2"}))

	// A reference no pool can ever give is refused before any node asks.
	setDesiredState(policy, strings.ReplaceAll(envtest.OneAddressState, "capture.addr.prefix-length", "capture.addr.prefix"))
	Eventually(enactmentState("tmpl01.tmpl")).Should(ContainSubstring(
		`the template reads {{ capture.addr.prefix }}, but capture "addr" (ippool.tmpl.allocate) has no field "prefix"`))
}

// setDesiredState changes a policy's desired state, again on a conflict:
// the policy controller writes its status meanwhile.
func setDesiredState(policy *nmstatev1.NodeNetworkConfigurationPolicy, desired string) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
			return err
		}
		policy.Spec.DesiredState = shared.NewState(desired)
		return k.Update(ctx, policy)
	})).To(Succeed())
}

// TestDeletedPoolLeavesStrays: a pool whose only quarantines are strays
// (an address a node carries and no holder records) goes when it is
// deleted: no record will ever release them, so they are never taken off.
// A pool created again over the range holds them again for their node,
// from its NodeNetworkState, and hands them to nobody else.
func TestDeletedPoolLeavesStrays(t *testing.T) {
	RegisterTestingT(t)
	startControllerWith(t, time.Minute)
	const name, net = "strays", "10.97.0"
	carryingNode(t, t.TempDir(), name+"-01", name, net+".7", false)
	Eventually(func() bool { return strings.Contains(nodeStateOf(name+"-01"), net+".7") }).Should(BeTrue())
	createPool(t, name, ippoolv1.IPRange{CIDR: net + ".0/24"})
	Eventually(available(name)).Should(HavePrefix("True"))
	Expect(bits(name)).To(Equal([]string{net + ".7"}))

	Expect(k.Delete(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k.Get(ctx, types.NamespacedName{Name: name}, &ippoolv1.NodeIPPool{}))
	}).Should(BeTrue(), "a stray holds no deleted pool")

	createPool(t, name, ippoolv1.IPRange{CIDR: net + ".0/24"})
	Eventually(available(name)).Should(HavePrefix("True"))
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &p)).To(Succeed())
	q := quarantined(&p.Status, net+".7")
	Expect(q).NotTo(BeNil(), "the pool created again holds the stray")
	Expect(q.Node).To(Equal(name + "-01"))
	Expect(q.HolderName()).To(BeEmpty())
}

// TestUnrecordedCarriedAddressGoesBack: a pool's status holds addresses
// that no holder records (a record lost, or an entry restored from a
// backup whose holder is gone) and that nodes carry. A node that alone
// carries one, served long before garbage collection would find it, gets
// it back, not a new one; an address two nodes carry goes to neither. And
// a free address that a node the policy does not select carries (its
// state published after the pool's rebuild) goes to no node asking for a
// new one: it is the lowest free address. A self-allocating handler,
// which cannot read every holder's records, asks the pool controller
// rather than take a new address for a node that carries such an
// address.
//
// The second carrier of the shared address is a node the policy does not
// select: a selected one would replace it on eth1 with its own address
// when it applies, after which the other carries it alone and may rightly
// get it back, or have it held, depending on which applies first.
func TestUnrecordedCarriedAddressGoesBack(t *testing.T) {
	RegisterTestingT(t)
	pc, err := env.StartPoolController(time.Hour, nil) // collection would not find them in time
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	for i, selfAllocate := range []bool{false, true} {
		t.Run(fmt.Sprintf("self-allocate=%v", selfAllocate), func(t *testing.T) {
			unrecordedGoesBack(t, fmt.Sprintf("unrecorded%d", i), fmt.Sprintf("10.97.%d", 10+i), selfAllocate)
		})
	}
}

// TestUnrecordedCarriedAddressOfAFullPoolGoesBack: a pool of one address,
// set in its status and recorded by no holder (restored with its status,
// without the enactments), and a self-allocating node that carries it.
// The handler, which finds no free address, does not report the pool
// exhausted: it asks the pool controller, which gives the node its
// address back.
func TestUnrecordedCarriedAddressOfAFullPoolGoesBack(t *testing.T) {
	RegisterTestingT(t)
	pc, err := env.StartPoolController(time.Hour, nil) // collection would not find it in time
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	const name, ip = "unrecorded-full", "10.97.12.30"
	createPool(t, name, ippoolv1.IPRange{CIDR: "10.97.12.0/24", Start: ip, End: ip})
	Eventually(available(name)).Should(HavePrefix("True"))
	writeBits(name, ip)
	nd := carryingNode(t, t.TempDir(), name+"-01", name, ip, true)
	Eventually(func() bool { return strings.Contains(nodeStateOf(nd.Name), ip) }).Should(BeTrue())
	createPolicy(t, name, name, name)
	Eventually(enactmentState(nd.Name + "." + name)).Should(HavePrefix("Available"))
	Expect(held(nd.Name+"."+name, name)).To(Equal([]string{ip}))
	Expect(events("NodeNetworkConfigurationEnactment", nd.Name+"."+name)()).NotTo(ContainElement(HavePrefix(ippoolv1.ReasonIPPoolExhausted)))
}

// unrecordedGoesBack runs TestUnrecordedCarriedAddressGoesBack with
// nodes, pool and policy called name, in the /24 of net.
func unrecordedGoesBack(t *testing.T, name, net string, selfAllocate bool) {
	RegisterTestingT(t)
	alone, twice, lowest := net+".30", net+".31", net+".10"
	createPool(t, name, ippoolv1.IPRange{CIDR: net + ".0/24", Start: net + ".10", End: net + ".50"})
	Eventually(available(name)).Should(HavePrefix("True"))
	writeBits(name, alone, twice) // after the pool's rebuild, which would have found them
	dir := t.TempDir()
	nodes := []*envtest.Node{carryingNode(t, dir, name+"-01", name, alone, selfAllocate),
		carryingNode(t, dir, name+"-02", name, twice, selfAllocate)}
	also := carryingNode(t, dir, name+"-03", name+"-other", twice, selfAllocate)
	other := carryingNode(t, dir, name+"-04", name+"-other", lowest, selfAllocate)
	for nd, ip := range map[*envtest.Node]string{nodes[0]: alone, nodes[1]: twice, also: twice, other: lowest} {
		Eventually(func() bool { return strings.Contains(nodeStateOf(nd.Name), ip) }).Should(BeTrue())
	}
	nics := envtest.SampleNICs(t, nodes[0])
	nics.MustKeep(nodes[0].Name, netip.MustParseAddr(alone))

	createPolicy(t, name, name, name)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + "." + name)).Should(HavePrefix("Available"))
	}
	Expect(held(nodes[0].Name+"."+name, name)).To(Equal([]string{alone}), "the address the node carries, not a new one")
	Expect(held(nodes[1].Name+"."+name, name)).NotTo(ContainElement(twice), "node %s carries it too", also.Name)
	Expect(held(nodes[1].Name+"."+name, name)).NotTo(ContainElement(lowest), "node %s carries it", other.Name)
	Eventually(events("NodeIPPool", name)).Should(ContainElement(HavePrefix("AddressQuarantined: Held " + alone + " on node " + nodes[0].Name + " for")))
	Expect(poolStatus(name).Quarantined).To(BeEmpty(), "adopted at once, and nothing held for the others")
	Expect(nics.WithoutAddress()).To(BeEmpty())
}

// countingStateLists counts the lists of NodeNetworkStates read through
// it.
type countingStateLists struct {
	client.Reader
	lists atomic.Int32
}

func (c *countingStateLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*nncev1beta1.NodeNetworkStateList); ok {
		c.lists.Add(1)
	}
	return c.Reader.List(ctx, list, opts...)
}

// TestServeAvoidsWhatOtherNodesCarry: a node that asks nothing of the pool
// comes to carry one of its free addresses after the pool was built (a
// static address set by hand: no holder records it, and no bit is set).
// Nodes served afterwards are handed other addresses, and the serve learns
// what the nodes carry from its watch of their states, not from a list of
// every state from the API server for each serving pass.
func TestServeAvoidsWhatOtherNodesCarry(t *testing.T) {
	RegisterTestingT(t)
	reader := &countingStateLists{}
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		reader.Reader = pc.Pools.APIReader
		pc.Pools.APIReader = reader
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	const name = "avoid"
	createPool(t, name, ippoolv1.IPRange{CIDR: "10.81.0.0/24", Start: "10.81.0.2", End: "10.81.0.20"})
	Eventually(available(name)).Should(HavePrefix("True"))
	dir := t.TempDir()
	carryingNode(t, dir, "avoid-bystander", "not-"+name, "10.81.0.2", false)
	Eventually(func() []string {
		all, err := pc.Pools.Carried.Of(ctx)
		Expect(err).NotTo(HaveOccurred())
		return all[netip.MustParseAddr("10.81.0.2")]
	}).Should(Equal([]string{"avoid-bystander"}), "the watch shows what the bystander carries")
	Expect(bits(name)).To(BeEmpty(), "the address is free in the pool: only what the node carries keeps it")

	nodes := []*envtest.Node{addNode(t, dir, "avoid-01", name), addNode(t, dir, "avoid-02", name)}
	listsBefore := reader.lists.Load()
	createPolicy(t, name, name, name)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name + "." + name)).Should(HavePrefix("Available"))
	}
	Expect(append(held("avoid-01."+name, name), held("avoid-02."+name, name)...)).To(ConsistOf("10.81.0.3", "10.81.0.4"))
	Expect(reader.lists.Load()-listsBefore).To(BeZero(), "serving listed every node's state from the API server")
	assertIndexed(name)
}

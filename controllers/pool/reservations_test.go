package pool_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// reservations returns "Status Reason: message" of the pool's
// ReservationsHonored condition.
func reservations(name string) func() string {
	return poolCondition(name, ippoolv1.ConditionReservationsHonored)
}

// setReservations replaces a pool's reservations, as an admin's edit would.
func setReservations(name string, rs ...ippoolv1.Reservation) {
	Eventually(func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		p.Spec.Reservations = rs
		return k.Update(ctx, &p)
	}).Should(Succeed())
}

// capturedState returns the captured state of an enactment's capture.
func capturedState(enactment, name string) capture.Address {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	Expect(k.Get(ctx, types.NamespacedName{Name: enactment}, &e)).To(Succeed())
	a, ok := capture.ParseState(e.Status.CapturedStates[name].State.Raw)
	Expect(ok).To(BeTrue(), "captured state of %s in %s", name, enactment)
	return a
}

// TestReservationsGatewayAndDNS: a pool with a gateway, DNS servers and
// reservations by node name and by label. The reserved nodes get their
// addresses (one from the controller, one allocating itself), the others
// never get a reserved address nor the gateway, and every record carries
// the gateway and DNS. A reservation held by another node, or not held by
// its node, shows in ReservationsHonored with the command that fixes it;
// running it moves the address.
func TestReservationsGatewayAndDNS(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "resv"}, Spec: ippoolv1.NodeIPPoolSpec{
		Range:   ippoolv1.IPRange{CIDR: "10.66.0.0/24", End: "10.66.0.9"},
		Gateway: "10.66.0.1",
		DNS:     &ippoolv1.DNS{Servers: []string{"10.66.0.53"}, Search: []string{"lab.example"}},
		Reservations: []ippoolv1.Reservation{
			{IP: "10.66.0.7", Node: "resv02"},
			{IP: "10.66.0.6", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"serial": "xyz"}}},
		},
	}}
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteObject(p) })
	Eventually(available("resv")).Should(HavePrefix("True"))
	Eventually(func(g Gomega) {
		var got ippoolv1.NodeIPPool
		g.Expect(k.Get(ctx, client.ObjectKeyFromObject(p), &got)).To(Succeed())
		g.Expect([]any{got.Status.Start, got.Status.End, got.Status.Size}).To(Equal([]any{"10.66.0.1", "10.66.0.9", int64(8)}),
			"the defaulted start is shown; the gateway is not handed out")
	}).Should(Succeed())
	createPolicy(t, "resv", "resv", "resv")
	dir := t.TempDir()
	addNode(t, dir, "resv01", "resv")
	Eventually(enactmentState("resv01.resv")).Should(HavePrefix("Available"))
	// resv02 allocates itself: the handler follows the reservations too.
	addNodeWith(t, dir, "resv02", "resv", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = true }
	})
	labelled := newNode("resv03", "resv")
	labelled.Labels["serial"] = "xyz"
	Expect(k.Create(ctx, labelled)).To(Succeed())
	nd := envtest.NewNode("resv03", dir, simBin)
	Expect(nd.Start(env)).To(Succeed())
	t.Cleanup(func() { _ = nd.Stop(); _ = k.Delete(ctx, labelled) })
	for _, n := range []string{"resv02", "resv03"} {
		Eventually(enactmentState(n + ".resv")).Should(HavePrefix("Available"))
	}
	Expect(held("resv01.resv", "resv")).To(Equal([]string{"10.66.0.2"}), "not the gateway")
	Expect(held("resv02.resv", "resv")).To(Equal([]string{"10.66.0.7"}), "reserved by name")
	Expect(held("resv03.resv", "resv")).To(Equal([]string{"10.66.0.6"}), "reserved by label")
	a := capturedState("resv01.resv", "addr")
	Expect([]string{a.Gateway.String(), fmt.Sprint(a.DNSServers), fmt.Sprint(a.DNSSearch)}).To(Equal(
		[]string{"10.66.0.1", "[10.66.0.53]", "[lab.example]"}))
	Expect(capturedState("resv02.resv", "addr").Gateway.String()).To(Equal("10.66.0.1"), "the handler records the gateway too")
	Eventually(reservations("resv")).Should(HavePrefix("True ReservationsHonored"))
	assertIndexed("resv")

	// A reservation for a node that does not exist yet, of an address
	// resv01 holds: a conflict, named, with the command that moves it.
	setReservations("resv", ippoolv1.Reservation{IP: "10.66.0.7", Node: "resv02"},
		ippoolv1.Reservation{IP: "10.66.0.6", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"serial": "xyz"}}},
		ippoolv1.Reservation{IP: "10.66.0.2", Node: "resv09"})
	Eventually(reservations("resv")).Should(Equal("False ReservationConflict: 10.66.0.2 is reserved for node resv09 but held by node resv01 " +
		"(enactment resv01.resv); to move it, run: kubectl annotate nnce resv01.resv nmstate.io/reset-ippool=resv. The holder keeps the address until then"))
	Eventually(events("NodeIPPool", "resv")).Should(ContainElement(HavePrefix("ReservationConflict: 10.66.0.2 is reserved for node resv09")))
	Expect(held("resv01.resv", "resv")).To(Equal([]string{"10.66.0.2"}), "nothing is taken from the holder")

	// A reservation for resv01 of a free address: resv01 keeps what it
	// holds until its enactment is reset, then moves.
	setReservations("resv", ippoolv1.Reservation{IP: "10.66.0.7", Node: "resv02"},
		ippoolv1.Reservation{IP: "10.66.0.6", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"serial": "xyz"}}},
		ippoolv1.Reservation{IP: "10.66.0.8", Node: "resv01"})
	Eventually(reservations("resv")).Should(Equal("False ReservationNotHeld: node resv01 holds 10.66.0.2, not its reserved 10.66.0.8, " +
		"which is free; to move it, run: kubectl annotate nnce resv01.resv nmstate.io/reset-ippool=resv. A node keeps the address it holds until it is reset as the command says"))
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "resv01.resv"}}, "resv")
	Eventually(func() []string { return held("resv01.resv", "resv") }).Should(Equal([]string{"10.66.0.8"}))
	Eventually(enactmentState("resv01.resv")).Should(HavePrefix("Available"))
	Eventually(reservations("resv")).Should(HavePrefix("True ReservationsHonored"))
	assertIndexed("resv")

	// Nodes that join now get neither a reserved address nor the
	// gateway, until the pool is full.
	addNode(t, dir, "resv04", "resv")
	addNode(t, dir, "resv05", "resv")
	addNode(t, dir, "resv06", "resv")
	for _, n := range []string{"resv04", "resv05", "resv06"} {
		Eventually(enactmentState(n + ".resv")).Should(HavePrefix("Available"))
		Expect(held(n+".resv", "resv")).To(ConsistOf(BeElementOf("10.66.0.2", "10.66.0.3", "10.66.0.4", "10.66.0.5", "10.66.0.9")))
	}
	assertIndexed("resv")
}

// TestReservedAddressCarriedByAnotherNode: an admin reserves 10.83.0.2 for
// node carried-01 while node carried-by's network carries it (set by
// hand: no holder records it, its bit is clear). carried-01 is given
// another address, not the reserved one, which would put it on two NICs,
// and ReservationsHonored names the node that carries it. Once the address
// is taken off that node, it is free for its node, and the reset the
// condition then names moves carried-01 to it.
func TestReservedAddressCarriedByAnotherNode(t *testing.T) {
	RegisterTestingT(t)
	pc, err := env.StartPoolController(grace, nil)
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	const name = "carried"
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{
		Range:        ippoolv1.IPRange{CIDR: "10.83.0.0/24", Start: "10.83.0.2", End: "10.83.0.20"},
		Reservations: []ippoolv1.Reservation{{IP: "10.83.0.2", Node: "carried-01"}},
	}}
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deleteObject(p) })
	Eventually(available(name)).Should(HavePrefix("True"))
	dir := t.TempDir()
	bystander := carryingNode(t, dir, "carried-by", "not-"+name, "10.83.0.2", false)
	Eventually(func() string { return nodeStateOf("carried-by") }).Should(ContainSubstring("10.83.0.2"))

	reserved := addNode(t, dir, "carried-01", name)
	nics := envtest.SampleNICs(t, bystander, reserved)
	createPolicy(t, name, name, name)
	Eventually(enactmentState("carried-01." + name)).Should(HavePrefix("Available"))
	Expect(held("carried-01."+name, name)).To(Equal([]string{"10.83.0.3"}), "not the reserved address another node carries")
	Eventually(reservations(name)).Should(Equal("False ReservationConflict: 10.83.0.2 is reserved for node carried-01 but node carried-by's " +
		"network carries it and no holder records it, so no one is given it; take it off node carried-by (set by hand, or by a policy of its own). " +
		"The holder keeps the address until then"))

	// The admin takes it off the other node, which publishes its state.
	before := publishedAt("carried-by")
	Expect(bystander.Network.Runner.Apply(ctx, []byte("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  ipv4:\n    enabled: false\n"))).To(Succeed())
	Expect(bystander.Network.Runner.Commit(ctx)).To(Succeed())
	Eventually(func() time.Time { return time.Now().Truncate(time.Second) }).Should(BeTemporally(">", before))
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "carried-by"}}
	Expect(k.Patch(ctx, nns, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:"%d"}}}`,
		ippoolv1.RefreshStateLabel, time.Now().UnixNano())))).To(Succeed())
	Eventually(func() string { return nodeStateOf("carried-by") }).ShouldNot(ContainSubstring("10.83.0.2"))
	Eventually(reservations(name)).Should(HavePrefix("False ReservationNotHeld: node carried-01 holds 10.83.0.3, not its reserved 10.83.0.2"))
	annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "carried-01." + name}}, name)
	Eventually(func() []string { return held("carried-01."+name, name) }).Should(Equal([]string{"10.83.0.2"}))
	Eventually(reservations(name)).Should(HavePrefix("True ReservationsHonored"))
	Expect(nics.OnTwoNICs()).To(BeEmpty())
	assertIndexed(name)
}

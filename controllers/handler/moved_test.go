package handler_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestAddressMovedToAnotherInterface: a policy edited to put its pool
// address on another interface (eth2 to eth3) takes it off the one it
// was on in the same apply: nmstate leaves an interface a state does not
// name as it is, and the address would be on two NICs. The old interface
// keeps its other addresses, the node keeps its address, and the
// enactment records the policy's state as rendered.
func TestAddressMovedToAnotherInterface(t *testing.T) {
	RegisterTestingT(t)
	ctx := context.Background()
	nd := newNodes(t, "moved", 1, map[string]string{"role": "moved"})[0]
	newPool(t, "moved-pool", ippoolv1.IPRange{CIDR: "10.96.0.0/24"}, true)
	p := newPolicy(t, "moved", map[string]string{"role": "moved"}, map[string]string{"addr": "ippool.moved-pool.allocate"},
		envtest.AddressOn("eth2", "192.0.2.9/24"))
	start(t, nd)
	Eventually(enactmentState(nd.Name, "moved")).Should(HavePrefix("Available"))
	address := held(nd.Name, "moved", "moved-pool")
	Expect(address).To(HaveLen(1))
	Expect(nd.ConfiguredAll("eth2")).To(ConsistOf(address[0]+"/24", "192.0.2.9/24"))

	Expect(envtest.Edit(ctx, k, p, func(p *nmstatev1.NodeNetworkConfigurationPolicy) {
		p.Spec.DesiredState = shared.NewState(envtest.AddressOn("eth3"))
	})).To(Succeed())
	Eventually(func(g Gomega) {
		e, err := getEnactment(nd.Name, "moved")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(e.Status.PolicyGeneration).To(Equal(p.Generation))
		g.Expect(enactmentState(nd.Name, "moved")()).To(HavePrefix("Available"))
		g.Expect(string(e.Status.DesiredState.Raw)).NotTo(ContainSubstring("eth2"), "the enactment records more than the policy's state")
	}).Should(Succeed())
	Expect(held(nd.Name, "moved", "moved-pool")).To(Equal(address))
	Expect(nd.ConfiguredAll("eth3")).To(ConsistOf(address[0] + "/24"))
	Expect(nd.ConfiguredAll("eth2")).To(ConsistOf("192.0.2.9/24"), "the address is on two NICs, or eth2 lost its own")
}

// TestAddressOnLearnedFamilyReported: an address a policy no longer puts
// on an interface whose family is configured by DHCP or autoconf cannot
// be taken off alone (nmstate manages that family's addresses): the
// apply puts it where the policy says and a Warning Event on the
// enactment says it is on the old interface too, and where.
func TestAddressOnLearnedFamilyReported(t *testing.T) {
	RegisterTestingT(t)
	ctx := context.Background()
	nd := newNodes(t, "learned", 1, map[string]string{"role": "learned"})[0]
	newPool(t, "learned-pool", ippoolv1.IPRange{CIDR: "10.97.0.0/24"}, true)
	onDHCP := strings.Replace(envtest.AddressOn("eth2"), "dhcp: false", "dhcp: true", 1)
	p := newPolicy(t, "learned", map[string]string{"role": "learned"}, map[string]string{"addr": "ippool.learned-pool.allocate"}, onDHCP)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "learned")).Should(HavePrefix("Available"))
	address := held(nd.Name, "learned", "learned-pool")
	Expect(address).To(HaveLen(1))
	Expect(enactmentEvents(nd.Name, "learned")()).NotTo(ContainElement(HavePrefix(ippoolv1.ReasonAddressNotMoved)))

	Expect(envtest.Edit(ctx, k, p, func(p *nmstatev1.NodeNetworkConfigurationPolicy) {
		p.Spec.DesiredState = shared.NewState(envtest.AddressOn("eth3"))
	})).To(Succeed())
	Eventually(enactmentEvents(nd.Name, "learned")).Should(ContainElement(And(
		HavePrefix(ippoolv1.ReasonAddressNotMoved+": "+address[0]+" is on node "+nd.Name+"'s interface eth2 too"),
		ContainSubstring("ipv4 is configured by DHCP or autoconf"))))
	Eventually(enactmentState(nd.Name, "learned")).Should(HavePrefix("Available"))
	Expect(nd.ConfiguredAll("eth3")).To(ConsistOf(address[0] + "/24"))
}

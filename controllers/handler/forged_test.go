package handler_test

import (
	"context"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// forgedState is what a writer other than the node stores in its
// enactment: an address nobody gave it, on an interface the policy does
// not name.
const forgedState = `interfaces:
- name: eth2
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: 10.99.99.99
      prefix-length: 24
`

// TestStoredDesiredStateIsNotApplied stores a state in a node's enactment
// that the node did not render, with a granted apply slot, as a writer
// with another node's credentials could before the admission policy: the
// handler applies what it renders from the policy and its own record, and
// the forged state never reaches the network.
func TestStoredDesiredStateIsNotApplied(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "forged", 1, map[string]string{"role": "forged"})[0]
	newPool(t, "forged-pool", ippoolv1.IPRange{CIDR: "10.31.0.0/24"}, true)
	newPolicy(t, "forged", map[string]string{"role": "forged"}, map[string]string{"addr": "ippool.forged-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "forged")).Should(HavePrefix("Available"))
	own := held(nd.Name, "forged", "forged-pool")[0] + "/24"
	Expect(nd.Configured("eth1")).To(Equal(own))

	applies := nd.Network.Applies.Load()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		e, err := getEnactment(nd.Name, "forged")
		if err != nil {
			return err
		}
		now := metav1.NowMicro()
		e.Status.DesiredState = shared.NewState(forgedState)
		e.Status.Slot = &nncev1beta1.ApplySlot{Requested: now, Granted: &now}
		return k.Status().Update(context.Background(), e)
	})).To(Succeed())

	// The handler takes the granted slot: it applies, and gives the slot back.
	Eventually(nd.Network.Applies.Load).Should(BeNumerically(">", applies))
	Eventually(func(g Gomega) {
		e, err := getEnactment(nd.Name, "forged")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(e.Status.Slot).To(BeNil())
		g.Expect(string(e.Status.DesiredState.Raw)).NotTo(ContainSubstring("10.99.99.99"))
	}).Should(Succeed())
	Consistently(func() []string { return nd.ConfiguredAll("eth2") }, 2*time.Second).Should(BeEmpty())
	Expect(nd.Configured("eth1")).To(Equal(own))
}

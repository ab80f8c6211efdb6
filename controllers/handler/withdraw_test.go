package handler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestSecondPoolBlocksFirstWithdrawn: a policy draws from two pools and the
// second is not available: the address already taken from the first is
// withdrawn, so nothing stays allocated that no enactment records, and the
// enactment waits. Once the second pool opens, both are allocated.
func TestSecondPoolBlocksFirstWithdrawn(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "twopools", 1, map[string]string{"role": "twopools"})[0]
	newPool(t, "twopools-a", ippoolv1.IPRange{CIDR: "10.71.0.0/24"}, true)
	newPool(t, "twopools-b", ippoolv1.IPRange{CIDR: "fd00:72::/64", Start: "fd00:72::1", End: "fd00:72::ff"}, false)
	newPolicy(t, "twopools", map[string]string{"role": "twopools"},
		map[string]string{"a": "ippool.twopools-a.allocate", "b": "ippool.twopools-b.allocate"}, twoPoolState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "twopools")).Should(ContainSubstring(`Pending: NodeIPPool "twopools-b"`))
	Consistently(func() ([]string, error) { return poolAddresses("twopools-a") }, time.Second).Should(BeEmpty(),
		"the first pool's address was given back")
	Expect(envtest.EntryAddresses(context.Background(), k, "twopools-a")).To(BeEmpty())
	markAvailable(t, "twopools-b")
	Eventually(enactmentState(nd.Name, "twopools")).Should(HavePrefix("Available"))
	Expect(held(nd.Name, "twopools", "twopools-a")).To(HaveLen(1))
	Expect(held(nd.Name, "twopools", "twopools-b")).To(HaveLen(1))
	assertIndexed("twopools-a")
	assertIndexed("twopools-b")
}

// TestEnactmentGoneBeforeRecordWithdraws: a self-allocating handler
// takes an address and stalls before it records it; meanwhile its
// enactment is deleted (an admin, or its policy's deletion). The record
// write finds it gone, so the record certainly does not exist: the
// handler withdraws the address at once, as on a conflict, and the
// enactment created again gets it. No pool controller runs here to
// revoke the entry later: without the withdrawal the address would stay
// taken by an entry nothing records, and the new enactment would get the
// next one.
func TestEnactmentGoneBeforeRecordWithdraws(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "gone", 1, map[string]string{"role": "gone"})[0]
	newPool(t, "gone-pool", ippoolv1.IPRange{CIDR: "10.74.0.0/24", Start: "10.74.0.1", End: "10.74.0.2"}, true)
	newPolicy(t, "gone", map[string]string{"role": "gone"}, map[string]string{"addr": "ippool.gone-pool.allocate"}, envtest.OneAddressState)
	resume := nd.Network.Stall()
	t.Cleanup(resume)
	start(t, nd)
	Eventually(func() ([]string, error) { return envtest.EntryAddresses(context.Background(), k, "gone-pool") }).
		Should(Equal([]string{"10.74.0.1"}))
	first, err := getEnactment(nd.Name, "gone")
	Expect(err).NotTo(HaveOccurred())
	Expect(k.Delete(context.Background(), first)).To(Succeed())
	Eventually(func() bool {
		_, err := getEnactment(nd.Name, "gone")
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "the enactment is retired, and its stalled handler cannot create it again before its record write")

	resume()
	Eventually(enactmentState(nd.Name, "gone")).Should(HavePrefix("Available"))
	Expect(held(nd.Name, "gone", "gone-pool")).To(Equal([]string{"10.74.0.1"}), "the withdrawn address is taken again")
	Consistently(func() ([]string, error) { return poolAddresses("gone-pool") }, time.Second).Should(Equal([]string{"10.74.0.1"}))
	Expect(nd.Configured("eth1")).To(Equal("10.74.0.1/24"))
}

package handler_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestNoAddressBeforeTheStateIsPublished: a handler that has just started
// (after a restart, or a restore that brought its Node back without its
// NodeNetworkState) asks for no address until its state reporter has
// published the node's state: the node keeps the address it carries
// instead of being given a new one over it. The reporter cannot read the
// state at first (nmstatectl show fails), and publishes that failure,
// which tells nothing of what the node carries.
func TestNoAddressBeforeTheStateIsPublished(t *testing.T) {
	RegisterTestingT(t)
	ctx := context.Background()
	nd := newNodes(t, "sp", 1, map[string]string{"sp": "yes"})[0]
	carried := `{"interfaces":[{"name":"eth1","type":"ethernet","state":"up","ipv4":{"enabled":true,"dhcp":false,"address":[{"ip":"10.91.0.20","prefix-length":24}]}}]}`
	Expect(nd.Network.Apply(ctx, []byte(carried))).To(Succeed())
	Expect(nd.Network.Commit(ctx)).To(Succeed())
	Expect(os.WriteFile(nd.State+".fail", []byte("show: NetworkManager is not running yet\n"), 0o600)).To(Succeed())
	start(t, nd)
	newPool(t, "sp-pool", ippoolv1.IPRange{CIDR: "10.91.0.0/24", Start: "10.91.0.10", End: "10.91.0.30"}, true)
	newPolicy(t, "sp-policy", map[string]string{"sp": "yes"}, map[string]string{"addr": "ippool.sp-pool.allocate"}, envtest.OneAddressState)

	Consistently(func() []string { return held(nd.Name, "sp-policy", "sp-pool") }, 2*time.Second).Should(BeEmpty())
	Expect(poolAddresses("sp-pool")).To(BeEmpty(), "nothing taken before the state is known")
	Expect(os.Remove(nd.State + ".fail")).To(Succeed())
	Eventually(func() []string { return held(nd.Name, "sp-policy", "sp-pool") }).Should(Equal([]string{"10.91.0.20"}),
		"the address the node carries")
}

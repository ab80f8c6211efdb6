package handler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestPolicyRecreated is the specification's "NNCP re-creation" workflow:
// deleting the policy returns its addresses, re-creating it allocates again.
func TestPolicyRecreated(t *testing.T) {
	RegisterTestingT(t)
	nodes := newNodes(t, "recreate", 2, map[string]string{"role": "recreate"})
	newPool(t, "recreate-pool", ippoolv1.IPRange{CIDR: "10.30.0.0/24"}, true)
	newPolicy(t, "recreate", map[string]string{"role": "recreate"}, map[string]string{"addr": "ippool.recreate-pool.allocate"}, envtest.OneAddressState)
	for _, nd := range nodes {
		start(t, nd)
		Eventually(enactmentState(nd.Name, "recreate")).Should(HavePrefix("Available"))
	}
	assertIndexed("recreate-pool")

	deletePolicy(t, "recreate")
	for _, nd := range nodes {
		Eventually(func() bool { _, err := getEnactment(nd.Name, "recreate"); return apierrors.IsNotFound(err) }).Should(BeTrue())
	}
	Eventually(func() ([]string, error) { return envtest.EntryAddresses(context.Background(), k, "recreate-pool") }).
		Should(Equal([]string{"10.30.0.1", "10.30.0.2"}), "quarantined until the pool controller sees them gone")

	newPolicy(t, "recreate", map[string]string{"role": "recreate"}, map[string]string{"addr": "ippool.recreate-pool.allocate"}, envtest.OneAddressState)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name, "recreate")).Should(HavePrefix("Available"))
		Expect(held(nd.Name, "recreate", "recreate-pool")).To(HaveLen(1))
	}
	assertIndexed("recreate-pool")
}

// TestStaleEnactmentOfAnEarlierPolicy: an enactment created for an
// earlier policy of the same name (deleted and created again while a
// watch missed the deletion) is ended and created anew for the policy
// that exists, never taken for it.
func TestStaleEnactmentOfAnEarlierPolicy(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "earlier", 1, map[string]string{"role": "earlier"})[0]
	p := newPolicy(t, "earlier", map[string]string{"role": "earlier"}, nil,
		"interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  mtu: 1400\n")
	start(t, nd)
	Eventually(enactmentState(nd.Name, "earlier")).Should(HavePrefix("Available"))
	e, err := getEnactment(nd.Name, "earlier")
	Expect(err).NotTo(HaveOccurred())
	Expect(e.Annotations).To(HaveKeyWithValue(ippoolv1.PolicyUIDAnnotation, string(p.UID)))
	old := e.UID
	e.Annotations[ippoolv1.PolicyUIDAnnotation] = "uid-of-an-earlier-policy"
	Expect(k.Update(context.Background(), e)).To(Succeed())
	Eventually(func() types.UID { e, _ := getEnactment(nd.Name, "earlier"); return e.UID }).ShouldNot(Equal(old))
	Eventually(enactmentState(nd.Name, "earlier")).Should(HavePrefix("Available"))
	e, err = getEnactment(nd.Name, "earlier")
	Expect(err).NotTo(HaveOccurred())
	Expect(e.Annotations).To(HaveKeyWithValue(ippoolv1.PolicyUIDAnnotation, string(p.UID)))
}

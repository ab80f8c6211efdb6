package lifecycle_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestReadCarryingNeedsAPublishedState: what a node carries is known
// only from a NodeNetworkState that holds a state. A node whose handler
// has made the object and not yet written the state, like a node with no
// object, is left out (its asker adopts nothing, and a pooled policy
// waits for it), whether the states are read one by one or listed (from
// 128 nodes on).
func TestReadCarryingNeedsAPublishedState(t *testing.T) {
	RegisterTestingT(t)
	pool := &ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.93.0.0/24", Start: "10.93.0.10", End: "10.93.0.30"}}}
	Expect(envtest.PublishState(ctx, k, "rc-1", `{"interfaces":[{"name":"eth1","ipv4":{"enabled":true,"address":[{"ip":"10.93.0.20","prefix-length":24}]}}]}`,
		time.Now())).To(Succeed())
	empty := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "rc-2"}}
	Expect(k.Create(ctx, empty)).To(Succeed())
	t.Cleanup(func() {
		_ = k.Delete(ctx, empty)
		_ = k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "rc-1"}})
	})
	few := []string{"rc-1", "rc-2", "rc-3"}
	many := slices.Clone(few)
	for i := range 130 {
		many = append(many, fmt.Sprintf("rc-x%d", i))
	}
	for name, nodes := range map[string][]string{"one by one": few, "listed": many} {
		c, err := lifecycle.ReadCarrying(ctx, k, pool, nodes, nil)
		Expect(err).NotTo(HaveOccurred(), name)
		Expect(slices.Sorted(maps.Keys(c.ByNode))).To(Equal([]string{"rc-1"}), name)
		Expect(c.ByNode["rc-1"]).To(HaveKeyWithValue(netip.MustParseAddr("10.93.0.20"), "eth1"), name)
		Expect(c.Carriers[netip.MustParseAddr("10.93.0.20")]).To(Equal([]string{"rc-1"}), name)
	}
}

// TestWithCarriersCountsLiveNodes: the carriers a writer avoids are those
// the states of existing Nodes show, whether ReadCarrying listed them or
// not; the state a deleted Node left behind (nothing collects it here)
// keeps nothing from anyone.
func TestWithCarriersCountsLiveNodes(t *testing.T) {
	RegisterTestingT(t)
	state := func(ip string) string {
		return `{"interfaces":[{"name":"eth1","ipv4":{"enabled":true,"address":[{"ip":"` + ip + `","prefix-length":24}]}}]}`
	}
	live := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "wc-live"}}
	Expect(k.Create(ctx, live)).To(Succeed())
	Expect(envtest.PublishState(ctx, k, "wc-live", state("10.94.0.20"), time.Now())).To(Succeed())
	Expect(envtest.PublishState(ctx, k, "wc-gone", state("10.94.0.21"), time.Now())).To(Succeed())
	t.Cleanup(func() {
		_ = k.Delete(ctx, live)
		for _, n := range []string{"wc-live", "wc-gone"} {
			_ = k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
	})
	for name, c := range map[string]assign.Carrying{
		"not listed": {},
		"listed":     {Carriers: map[netip.Addr][]string{netip.MustParseAddr("10.94.0.21"): {"wc-gone"}, netip.MustParseAddr("10.94.0.20"): {"wc-live"}}},
	} {
		got, err := lifecycle.WithCarriers(ctx, k, c, nil)
		Expect(err).NotTo(HaveOccurred(), name)
		Expect(got.Carriers).To(HaveKeyWithValue(netip.MustParseAddr("10.94.0.20"), []string{"wc-live"}), name)
		Expect(got.Carriers).NotTo(HaveKey(netip.MustParseAddr("10.94.0.21")), name)
	}
}

// nodeLists counts the lists of Nodes read through it.
type nodeLists struct {
	client.Reader
	n int
}

func (r *nodeLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if m, ok := list.(*metav1.PartialObjectMetadataList); ok && m.GetObjectKind().GroupVersionKind().Kind == "NodeList" {
		r.n++
	}
	return r.Reader.List(ctx, list, opts...)
}

// TestWithCarriersKeepsTheRange: the carriers a writer of a pool avoids
// are those of the addresses the pool hands out; the Nodes are listed
// only when some node's state shows one (a consistent list of Nodes
// waits on the API server's watch cache, and most ranges are carried by
// no node).
func TestWithCarriersKeepsTheRange(t *testing.T) {
	RegisterTestingT(t)
	live := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "wr-live"}}
	Expect(k.Create(ctx, live)).To(Succeed())
	Expect(envtest.PublishState(ctx, k, "wr-live", `{"interfaces":[`+
		`{"name":"eth1","ipv4":{"enabled":true,"address":[{"ip":"10.95.0.20","prefix-length":24}]}},`+
		`{"name":"eth2","ipv4":{"enabled":true,"address":[{"ip":"10.95.1.5","prefix-length":24}]}}]}`, time.Now())).To(Succeed())
	t.Cleanup(func() {
		_ = k.Delete(ctx, live)
		_ = k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "wr-live"}})
	})
	rangeOf := func(cidr, start, end string) *ippool.Range {
		rng, err := poolstatus.Range(&ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: cidr, Start: start, End: end}}})
		Expect(err).NotTo(HaveOccurred())
		return rng
	}

	r := &nodeLists{Reader: k}
	got, err := lifecycle.WithCarriers(ctx, r, assign.Carrying{}, rangeOf("10.95.0.0/24", "10.95.0.10", "10.95.0.30"))
	Expect(err).NotTo(HaveOccurred())
	Expect(got.Carriers).To(Equal(map[netip.Addr][]string{netip.MustParseAddr("10.95.0.20"): {"wr-live"}}))
	Expect(r.n).To(Equal(1))

	r = &nodeLists{Reader: k}
	got, err = lifecycle.WithCarriers(ctx, r, assign.Carrying{}, rangeOf("10.95.2.0/24", "10.95.2.10", "10.95.2.30"))
	Expect(err).NotTo(HaveOccurred())
	Expect(got.Carriers).To(BeEmpty())
	Expect(r.n).To(BeZero(), "no node carries an address of the range: the Nodes need no list")
}

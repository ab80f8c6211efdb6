package claim

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestCarriedFollowsTheRange: what a claim's address avoids is read for
// the range of the pool each write attempt read: after a conflict the
// next attempt may see a range the admin widened in place, and an address
// a node carries in the new part is avoided too (a result kept for the
// first range would hand it out). Only a live Node's state counts.
func TestCarriedFollowsTheRange(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, nncev1beta1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	state := func(node, ip string) *nncev1beta1.NodeNetworkState {
		nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node}}
		nns.Status.CurrentState.Raw = []byte(`{"interfaces":[{"name":"eth1","ipv4":{"enabled":true,"address":[{"ip":"` + ip + `","prefix-length":24}]}}]}`)
		return nns
	}
	api := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "live"}}, state("live", "10.0.0.20"), state("gone", "10.0.0.21"),
	).Build()
	rangeOf := func(end string) *ippool.Range {
		rng, err := poolstatus.Range(&ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: end}}})
		if err != nil {
			t.Fatal(err)
		}
		return rng
	}
	c := &carried{source: carriers.FromAPI(api), api: api}
	ctx := context.Background()
	for _, tc := range []struct {
		end  string
		want map[netip.Addr][]string
	}{
		{"10.0.0.10", map[netip.Addr][]string{}},
		{"10.0.0.30", map[netip.Addr][]string{netip.MustParseAddr("10.0.0.20"): {"live"}}},
		{"10.0.0.10", map[netip.Addr][]string{}},
	} {
		got, err := c.in(ctx, rangeOf(tc.end))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) || (len(tc.want) > 0 && got[netip.MustParseAddr("10.0.0.20")][0] != "live") {
			t.Errorf("range up to %s: carried %v, want %v", tc.end, got, tc.want)
		}
	}
}

package claim

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// TestHoldForRestore: a restore holds the address of the IPAddress it
// makes again with the claim's entry, and takes over no other: another
// holder's entry on the address, or an earlier claim's of the same name,
// is named and left alone, and the IPAddress keeps its record until it
// is settled.
func TestHoldForRestore(t *testing.T) {
	claim := holder.ForClaim("ns", "m1").String()
	mine := ippoolv1.InFlightAddress{IP: "10.0.0.5", Holder: claim, Token: "uid-2", Since: metav1.Now()}
	for _, tc := range []struct {
		name        string
		there       *ippoolv1.InFlightAddress
		changed     bool
		other, want string
	}{
		{name: "no entry: the claim's is added", changed: true, want: claim + "/uid-2"},
		{name: "the claim's own, from a restore begun before", there: &mine, want: claim + "/uid-2"},
		{name: "another holder's", there: &ippoolv1.InFlightAddress{IP: "10.0.0.5", Holder: "node01.p", Token: "7", Since: metav1.Now()},
			other: "node01.p", want: "node01.p/7"},
		{name: "an earlier claim's of the name", there: &ippoolv1.InFlightAddress{IP: "10.0.0.5", Holder: claim, Token: "uid-1", Since: metav1.Now()},
			other: claim, want: claim + "/uid-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}}
			if tc.there != nil {
				poolstatus.AddInFlight(p, *tc.there)
			}
			alloc, err := poolstatus.Allocator(p)
			if err != nil {
				t.Fatal(err)
			}
			changed, other := holdForRestore(p, alloc, mine)
			if changed != tc.changed || other != tc.other {
				t.Errorf("holdForRestore = %v, %q; want %v, %q", changed, other, tc.changed, tc.other)
			}
			e := poolstatus.InFlightOf(p, "10.0.0.5")
			if got := e.HolderName() + "/" + e.Token; got != tc.want {
				t.Errorf("entry %s, want %s", got, tc.want)
			}
			if tc.changed && !alloc.HasIP(netip.MustParseAddr("10.0.0.5")) {
				t.Error("the bit is not set")
			}
		})
	}
}

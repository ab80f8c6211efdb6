package pool

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// TestManyRecordedEntriesArePrunedAtOnce: recorded in-flight entries wait
// pruneAfter, to be pruned together, unless pruneWhenMany of them wait:
// then they are pruned at once, for every write of the pool carries them.
// Entries not recorded yet do not count.
func TestManyRecordedEntriesArePrunedAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := maintainer{&Reconciler{Clock: clk, GracePeriod: time.Minute, QuarantinePeriod: time.Hour}}
	pool := func(recorded, unrecorded int) (*ippoolv1.NodeIPPool, poolstatus.Owners) {
		p := &ippoolv1.NodeIPPool{}
		owners := poolstatus.Owners{}
		for i := range recorded + unrecorded {
			name := fmt.Sprintf("node%03d.policy", i)
			ip := netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(i%250 + 1)})
			p.Status.InFlight = append(p.Status.InFlight, ippoolv1.InFlightAddress{IP: ip.String(), Holder: name,
				Token: fmt.Sprint(i), Since: metav1.NewTime(clk.Now())})
			if i < recorded {
				owners[ip] = []poolstatus.Owner{{Holder: holder.Parse(name)}}
			}
		}
		return p, owners
	}
	exists := func(string) bool { return true }
	for _, tc := range []struct {
		recorded, unrecorded int
		due                  bool
	}{
		{recorded: pruneWhenMany - 1, unrecorded: 10},
		{recorded: pruneWhenMany, due: true},
		{recorded: 1},
	} {
		var m poolMemory
		p, owners := pool(tc.recorded, tc.unrecorded)
		due, next := r.holdsDue(p, owners, exists, &m)
		if due != tc.due {
			t.Errorf("%d recorded entries (%d not): due %t, want %t", tc.recorded, tc.unrecorded, due, tc.due)
		}
		if !tc.due && next != pruneAfter {
			t.Errorf("%d recorded entries: next look in %s, want %s", tc.recorded, next, pruneAfter)
		}
		clk.Step(pruneAfter)
		if due, _ := r.holdsDue(p, owners, exists, &m); !due {
			t.Errorf("%d recorded entries: not due after %s", tc.recorded, pruneAfter)
		}
	}
}

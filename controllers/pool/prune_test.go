package pool

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestManyRecordedEntriesArePrunedAtOnce: recorded in-flight entries wait
// DefaultPruneAfter, to be pruned together, unless pruneWhenMany of them wait:
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
		if !tc.due && next != DefaultPruneAfter {
			t.Errorf("%d recorded entries: next look in %s, want %s", tc.recorded, next, DefaultPruneAfter)
		}
		clk.Step(DefaultPruneAfter)
		if due, _ := r.holdsDue(p, owners, exists, &m); !due {
			t.Errorf("%d recorded entries: not due after %s", tc.recorded, DefaultPruneAfter)
		}
	}
}

// TestLiftKeepsForTheDepartedNodeItself: a departed node's quarantine
// lifted to be kept for its return stays kept for it, though the
// carriers still count the departed node carrying the address (their
// hold counts from when this process saw the Node go): held for itself
// instead, its return would not get it back. Another node that carries
// it has it held for that node instead.
func TestLiftKeepsForTheDepartedNodeItself(t *testing.T) {
	const ip = "10.0.0.7"
	since := metav1.NewTime(time.Unix(1_700_000_000, 0))
	for _, tc := range []struct {
		name     string
		carriers []string
		kept     bool
		heldFor  string
	}{
		{"carried by the departed node alone", []string{"gone"}, true, ""},
		{"carried by another node too", []string{"gone", "intruder"}, false, "intruder"},
		{"carried by nobody", nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, alloc := emptyPool(t)
			if err := alloc.AllocateIP(netip.MustParseAddr(ip)); err != nil {
				t.Fatal(err)
			}
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: ip, Node: "gone", Holder: "gone.policy", Capture: "addr", Since: since})
			w := holdWork{lift: map[string]lift{ip: {since: since, why: "node gone is gone", keep: true}}}
			holdFor := map[netip.Addr][]string{}
			if tc.carriers != nil {
				holdFor[netip.MustParseAddr(ip)] = tc.carriers
			}
			_, lifted, held, _ := applyHolds(p, alloc, poolstatus.Owners{}, w, holdFor, metav1.Now())
			if kept := poolstatus.KeptOf(p, ip) != nil; kept != tc.kept || (len(lifted) == 1) != tc.kept {
				t.Fatalf("kept %v, lifted %v; want kept %v", kept, lifted, tc.kept)
			}
			q := poolstatus.QuarantineOf(p, ip)
			switch {
			case tc.heldFor == "" && (q != nil || len(held) > 0):
				t.Fatalf("held %v (%+v), want none", held, q)
			case tc.heldFor != "" && (q == nil || q.Node != tc.heldFor || q.HolderName() != ""):
				t.Fatalf("quarantine %+v, want one held for %s", q, tc.heldFor)
			}
			if !alloc.HasIP(netip.MustParseAddr(ip)) != tc.kept {
				t.Fatalf("bit set %v, want it clear only when kept", alloc.HasIP(netip.MustParseAddr(ip)))
			}
		})
	}
}

// TestUnreturn: an address kept for the return of another node's holder,
// which a node carries, is quarantined again as that holder's release,
// its bit set, and one quarantined for such a return stays quarantined
// for its release: neither goes back to its holder (no capture), and the
// node that comes back carrying it takes it off.
func TestUnreturn(t *testing.T) {
	p, alloc := emptyPool(t)
	since := metav1.NewTime(time.Unix(1_700_000_000, 0))
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.5", Node: "gone", Holder: "gone.policy", Capture: "addr", Since: since})
	if err := alloc.AllocateIP(netip.MustParseAddr("10.0.0.6")); err != nil {
		t.Fatal(err)
	}
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.6", Node: "left", Holder: "left.policy", Capture: "addr", Since: since})
	now := metav1.NewTime(since.Add(time.Hour))
	notes := audit.Notes{}
	got := unreturn(p, alloc, map[netip.Addr]string{netip.MustParseAddr("10.0.0.6"): "intruder", netip.MustParseAddr("10.0.0.5"): "intruder"}, now, notes)
	want := []string{"10.0.0.5 on node intruder (kept for the return of gone.policy)", "10.0.0.6 on node intruder (quarantined for the return of left.policy)"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("unreturned %q, want %q", got, want)
	}
	if len(notes) != 2 {
		t.Fatalf("audit notes %v, want one for each address", notes)
	}
	if poolstatus.KeptOf(p, "10.0.0.5") != nil || !alloc.HasIP(netip.MustParseAddr("10.0.0.5")) {
		t.Fatal("10.0.0.5 is still kept, or its bit clear")
	}
	if q := poolstatus.QuarantineOf(p, "10.0.0.5"); q == nil || q.Node != "gone" || q.HolderName() != "gone.policy" || q.Capture != "" ||
		!q.Since.Equal(&now) {
		t.Fatalf("10.0.0.5 quarantined as %+v, want gone.policy's release again since %v, with no capture to return to", q, now)
	}
	if q := poolstatus.QuarantineOf(p, "10.0.0.6"); q == nil || q.Node != "left" || q.HolderName() != "left.policy" || q.Capture != "" {
		t.Fatalf("10.0.0.6 quarantined as %+v, want left.policy's release with no capture to return to", q)
	}
}

// TestReturnConflicts: what a node carries that the pool keeps for the
// return of a holder of another node conflicts; its own holder's, a
// quarantine that returns to no one, and a kept address someone holds
// again do not.
func TestReturnConflicts(t *testing.T) {
	p, alloc := emptyPool(t)
	since := metav1.NewTime(time.Unix(1_700_000_000, 0))
	for _, k := range []ippoolv1.KeptAddress{
		{IP: "10.0.0.1", Node: "gone", Holder: "gone.policy", Capture: "addr", Since: since},
		{IP: "10.0.0.2", Node: "gone", Holder: "gone.policy", Capture: "other", Since: since},
		{IP: "10.0.0.3", Node: "gone", Holder: "gone.policy", Capture: "third", Since: since},
	} {
		poolstatus.AddKept(p, k)
	}
	for _, q := range []ippoolv1.QuarantinedAddress{
		{IP: "10.0.0.4", Node: "left", Holder: "left.policy", Capture: "addr", Since: since},
		{IP: "10.0.0.5", Node: "left", Holder: "left.policy", Since: since},
		{IP: "10.0.0.6", Node: "stray", Since: since},
	} {
		poolstatus.AddQuarantine(p, q)
		_ = alloc.AllocateIP(netip.MustParseAddr(q.IP))
	}
	_ = alloc.AllocateIP(netip.MustParseAddr("10.0.0.3")) // held again: forgetKept's to settle
	poolstatus.Set(p, alloc)
	p.Status.Conditions = []metav1.Condition{{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue}}
	now := metav1.Now()
	carriers := map[netip.Addr][]string{}
	for i := 1; i <= 6; i++ {
		carriers[netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})] = []string{"gone", "left", "intruder"}
	}
	carriers[netip.MustParseAddr("10.0.0.2")] = []string{"gone"}
	got := returnConflicts(p, carriers)
	want := map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "left", netip.MustParseAddr("10.0.0.4"): "gone"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("conflicts %v, want %v", got, want)
	}
	p.DeletionTimestamp = &now
	if got := returnConflicts(p, carriers); len(got) != 0 {
		t.Fatalf("in a pool being deleted: %v, want none", got)
	}
}

// emptyPool returns a pool over 10.0.0.0/24 with nothing set, and its
// allocator.
func emptyPool(t *testing.T) (*ippoolv1.NodeIPPool, *ippool.Allocator) {
	t.Helper()
	p := &ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}}
	alloc, err := poolstatus.Allocator(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, alloc
}

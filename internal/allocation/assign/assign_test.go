package assign

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

func testPool(reservations ...ippoolv1.Reservation) (*ippoolv1.NodeIPPool, *ippool.Allocator) {
	p := &ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{
		Range:        ippoolv1.IPRange{CIDR: "10.0.0.0/24", End: "10.0.0.6", Exclude: []string{"10.0.0.5"}},
		Gateway:      "10.0.0.1",
		Reservations: reservations,
	}}
	rng, err := poolstatus.Range(p)
	if err != nil {
		panic(err)
	}
	return p, ippool.NewAllocator(rng)
}

func asker(node string, labels map[string]string) Asker {
	return Asker{Holder: holder.ForEnactment(node + ".policy"), Node: node, Policy: "policy", Labels: func() map[string]string { return labels }}
}

func TestTakeOrder(t *testing.T) {
	rack := &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}
	p, alloc := testPool(
		ippoolv1.Reservation{IP: "10.0.0.2", Node: "pinned"},
		ippoolv1.Reservation{IP: "10.0.0.3", NodeSelector: rack},
		ippoolv1.Reservation{IP: "10.0.0.6", Node: "pinned", Policy: "other"},
	)
	// 10.0.0.4 was held by back.policy's capture addr and is kept for its
	// return.
	if err := alloc.AllocateIP(mustAddr("10.0.0.4")); err != nil {
		t.Fatal(err)
	}
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.4", Node: "back", Holder: "back.policy", Capture: "addr"})

	c := New(p, alloc)
	take := func(cl Asker, capture string) string {
		tk, err := c.Take(cl, capture)
		if err != nil {
			return err.Error()
		}
		return tk.IP.String()
	}
	if got := take(asker("other", nil), "addr"); !strings.Contains(got, "reserved for other nodes") {
		t.Fatalf("a node without reservation in a pool whose free addresses are all reserved got %s", got)
	}
	if _, err := c.Take(asker("back", nil), "other-capture"); !errors.Is(err, ippool.ErrFull) {
		t.Fatalf("another capture of the returning enactment: %v, want ErrFull", err)
	}
	if got := take(asker("back", nil), "addr"); got != "10.0.0.4" {
		t.Fatalf("the returning capture got %s, want its old 10.0.0.4", got)
	}
	if len(p.Status.Quarantined) != 0 {
		t.Fatalf("the returned address is still quarantined: %v", p.Status.Quarantined)
	}
	if got := take(asker("racked", map[string]string{"rack": "a"}), "addr"); got != "10.0.0.3" {
		t.Fatalf("the node selected by label got %s, want 10.0.0.3", got)
	}
	if got := take(asker("pinned", nil), "addr"); got != "10.0.0.2" {
		t.Fatalf("the pinned node got %s, want 10.0.0.2 (10.0.0.6 is for another policy)", got)
	}
	c.Done()
	if alloc.HasIP(mustAddr("10.0.0.6")) {
		t.Fatal("Done left a free reserved address allocated")
	}
	if got := fmt.Sprint(alloc.Count()); got != "3" {
		t.Fatalf("allocated %s addresses, want 3", got)
	}
}

func TestGiveUndoesTake(t *testing.T) {
	p, alloc := testPool(ippoolv1.Reservation{IP: "10.0.0.6", Node: "pinned"})
	if err := alloc.AllocateIP(mustAddr("10.0.0.4")); err != nil {
		t.Fatal(err)
	}
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.4", Holder: "back.policy", Capture: "addr"})
	before := alloc.Clone()
	c := New(p, alloc)
	for _, tc := range []struct {
		cl      Asker
		capture string
	}{{asker("back", nil), "addr"}, {asker("pinned", nil), "addr"}, {asker("anyone", nil), "addr"}} {
		tk, err := c.Take(tc.cl, tc.capture)
		if err != nil {
			t.Fatal(err)
		}
		c.Give(tk)
	}
	c.Done()
	if !alloc.Equal(before) || len(p.Status.Quarantined) != 1 {
		t.Fatalf("after Give and Done: %d allocated, quarantined %v; want what was there before", alloc.Count(), p.Status.Quarantined)
	}
}

// TestKeptForReturn: an address kept for a deleted node's return is free,
// but handed to others only when nothing else is, longest kept first, with
// a note; its own enactment and capture get it back with a note; Give puts
// a kept address back where it was.
func TestKeptForReturn(t *testing.T) {
	p, alloc := testPool()
	since := func(s int) metav1.Time { return metav1.Unix(int64(1_700_000_000+s), 0) }
	// 10.0.0.2 kept longer than 10.0.0.3; 10.0.0.5 is excluded, so only
	// 10.0.0.4 and 10.0.0.6 are free for anyone.
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.3", Node: "newer", Holder: "newer.policy", Capture: "addr", Since: since(20)})
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.2", Node: "older", Holder: "older.policy", Capture: "addr", Since: since(10)})
	before := alloc.Clone()
	c := New(p, alloc)
	var notes Notes
	take := func(cl Asker) string {
		tk, err := c.Take(cl, "addr")
		if err != nil {
			return err.Error()
		}
		notes.Add(tk, "addr")
		return tk.IP.String()
	}
	for _, want := range []string{"10.0.0.4", "10.0.0.6"} {
		if got := take(asker("fresh", nil)); got != want {
			t.Fatalf("a new node got %s, want the free %s before any kept address", got, want)
		}
	}
	if len(notes.Returned)+len(notes.Reclaimed) != 0 {
		t.Fatalf("notes for fresh addresses: %+v", notes)
	}
	tk, err := c.Take(asker("full", nil), "addr")
	if err != nil || tk.IP.String() != "10.0.0.2" {
		t.Fatalf("with nothing else free a node got %v, %v; want 10.0.0.2, kept longest", tk.IP, err)
	}
	c.Give(tk)
	if poolstatus.KeptOf(p, "10.0.0.2") == nil {
		t.Fatal("Give did not keep 10.0.0.2 again")
	}
	if got := take(asker("full", nil)); got != "10.0.0.2" {
		t.Fatalf("after Give a node got %s, want 10.0.0.2 again", got)
	}
	if got := take(asker("newer", nil)); got != "10.0.0.3" {
		t.Fatalf("the returning node got %s, want its kept 10.0.0.3", got)
	}
	if len(p.Status.KeptForReturn) != 0 {
		t.Fatalf("handed-out addresses are still kept: %v", p.Status.KeptForReturn)
	}
	if _, err := c.Take(asker("older", nil), "addr"); !errors.Is(err, ippool.ErrFull) {
		t.Fatalf("the node whose kept address was reclaimed: %v, want ErrFull", err)
	}
	c.Done()
	if alloc.Count() != before.Count()+4 {
		t.Fatalf("allocated %d, want the 4 taken", alloc.Count())
	}
	ev := notes.Events("pool")
	if len(ev) != 2 || ev[0].Reason != ippoolv1.ReasonAddressReturned || ev[1].Reason != ippoolv1.ReasonAddressReclaimed ||
		!strings.Contains(ev[0].Message, "10.0.0.3 to capture addr (kept since") ||
		!strings.Contains(ev[1].Message, "10.0.0.2, kept since 2023-11-14T22:13:30Z for the return of older.policy") {
		t.Fatalf("events = %+v", ev)
	}
}

// TestKeptCarriedIsNotReclaimed: a kept address that a node's network
// carries (its holder's machine, its Node deleted within the departure
// hold) is reclaimed for no other holder, not even another capture of
// its carrier (a second NIC of that machine), the full error counting it
// as carried; one no node carries is, though kept for less long; its own
// holder gets it back.
func TestKeptCarriedIsNotReclaimed(t *testing.T) {
	p, alloc := testPool()
	since := func(s int) metav1.Time { return metav1.Unix(int64(1_700_000_000+s), 0) }
	for _, ip := range []string{"10.0.0.4", "10.0.0.6"} {
		if err := alloc.AllocateIP(mustAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.2", Node: "gone", Holder: "gone.policy", Capture: "addr", Since: since(10)})
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.3", Node: "left", Holder: "left.policy", Capture: "addr", Since: since(20)})
	c := New(p, alloc)
	c.Avoid(map[netip.Addr][]string{mustAddr("10.0.0.2"): {"gone"}, mustAddr("10.0.0.3"): {"left"}})
	var full *FullError
	if _, err := c.Take(asker("fresh", nil), "addr"); !errors.As(err, &full) || full.Carried != 2 {
		t.Fatalf("with both kept addresses carried: %v, want ErrFull counting 2 carried", err)
	}
	if _, err := c.Take(asker("left", nil), "other"); !errors.Is(err, ippool.ErrFull) {
		t.Fatalf("another capture of the node that carries 10.0.0.3: %v, want ErrFull", err)
	}
	if tk, err := c.Take(asker("left", nil), "addr"); err != nil || tk.IP.String() != "10.0.0.3" {
		t.Fatalf("the holder 10.0.0.3 is kept for got %v, %v; want it back", tk.IP, err)
	}
	c.Done()

	p, alloc = testPool()
	for _, ip := range []string{"10.0.0.4", "10.0.0.6"} {
		if err := alloc.AllocateIP(mustAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.2", Node: "gone", Holder: "gone.policy", Capture: "addr", Since: since(10)})
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.3", Node: "left", Holder: "left.policy", Capture: "addr", Since: since(20)})
	c = New(p, alloc)
	c.Avoid(map[netip.Addr][]string{mustAddr("10.0.0.2"): {"gone"}})
	if tk, err := c.Take(asker("fresh", nil), "addr"); err != nil || tk.IP.String() != "10.0.0.3" {
		t.Fatalf("a new node got %v, %v; want 10.0.0.3, the kept address no one carries, before the longer kept 10.0.0.2", tk.IP, err)
	}
	c.Done()
}

// TestDoneReleasesKept: kept addresses nobody took stay free.
func TestDoneReleasesKept(t *testing.T) {
	p, alloc := testPool()
	poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.2", Holder: "gone.policy", Capture: "addr"})
	c := New(p, alloc)
	if tk, err := c.Take(asker("fresh", nil), "addr"); err != nil || tk.IP.String() != "10.0.0.3" {
		t.Fatalf("got %v, %v; want 10.0.0.3", tk.IP, err)
	}
	c.Done()
	if alloc.HasIP(mustAddr("10.0.0.2")) || poolstatus.KeptOf(p, "10.0.0.2") == nil {
		t.Fatal("Done did not leave the untouched kept address free and kept")
	}
}

func TestReservationsRefused(t *testing.T) {
	p, alloc := testPool(
		ippoolv1.Reservation{IP: "10.0.0.1", Node: "a"},
		ippoolv1.Reservation{IP: "10.0.0.5", Node: "a"},
		ippoolv1.Reservation{IP: "10.0.0.9", Node: "a"},
		ippoolv1.Reservation{IP: "ten", Node: "a"},
		ippoolv1.Reservation{IP: "10.0.0.2", Node: "a"},
		ippoolv1.Reservation{IP: "10.0.0.2", Node: "b"},
		ippoolv1.Reservation{IP: "10.0.0.3", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}},
	)
	valid, invalid := Reservations(p, alloc.Range())
	if len(valid) != 1 || valid[0].IP.String() != "10.0.0.2" || valid[0].Node != "a" {
		t.Fatalf("valid = %+v", valid)
	}
	var got []string
	for _, in := range invalid {
		got = append(got, in.IP+": "+in.Why)
	}
	want := []string{
		"10.0.0.1: it is the gateway",
		"10.0.0.5: it is excluded from the range 10.0.0.1-10.0.0.6",
		"10.0.0.9: it is outside the range 10.0.0.1-10.0.0.6",
		`ten: "ten" is not an IP address`,
		"10.0.0.2: it is reserved more than once",
		"10.0.0.3: its node selector is invalid",
	}
	if len(got) != len(want) {
		t.Fatalf("invalid = %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("invalid[%d] = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestKeptTakenThenUnrecorded: a kept address handed back whose record
// then fails (the served record refused, the handler's write lost) is kept
// again for its holder when its in-flight entry goes unrecorded, and free:
// the holder's next ask gets it back with a note, not whatever address is
// lowest.
func TestKeptTakenThenUnrecorded(t *testing.T) {
	p, alloc := testPool()
	kept := ippoolv1.KeptAddress{IP: "10.0.0.3", Node: "back", Holder: "back.policy", Capture: "addr", Since: metav1.Unix(1_700_000_000, 0)}
	poolstatus.AddKept(p, kept)
	c := New(p, alloc)
	tk, err := c.Take(asker("back", nil), "addr")
	if err != nil || tk.IP.String() != "10.0.0.3" {
		t.Fatalf("the returning node got %v, %v; want its kept 10.0.0.3", tk.IP, err)
	}
	c.Done()
	e := tk.InFlight(holder.ForEnactment("back.policy"), "42", metav1.Unix(1_700_000_100, 0))
	if e.Kept == nil || *e.Kept != kept {
		t.Fatalf("in-flight entry %+v does not name the kept entry %+v", e, kept)
	}
	poolstatus.AddInFlight(p, e)

	if !poolstatus.Unrecorded(p, "10.0.0.3") {
		t.Fatal("Unrecorded says the bit of a kept address may not be cleared")
	}
	_ = alloc.ReleaseIP(tk.IP)
	if got := poolstatus.KeptOf(p, "10.0.0.3"); got == nil || *got != kept {
		t.Fatalf("kept entry after Unrecorded = %+v, want %+v back", got, kept)
	}
	c = New(p, alloc)
	var notes Notes
	tk, err = c.Take(asker("back", nil), "addr")
	c.Done()
	notes.Add(tk, "addr")
	if err != nil || tk.IP.String() != "10.0.0.3" || len(notes.Returned) != 1 {
		t.Fatalf("the next ask got %v, %v with notes %+v; want 10.0.0.3 returned", tk.IP, err, notes)
	}
}

// TestCarriedElsewhereIsHandedToNoOne: an address another node's network
// carries is not handed to a holder of a node that does not carry it,
// whatever the pool keeps it for: its reservation, its return from
// quarantine, its return once kept. Each would put it on a second NIC
// while the carrier shows it. The carrier's own holder gets it as before.
func TestCarriedElsewhereIsHandedToNoOne(t *testing.T) {
	since := metav1.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name string
		// pool sets up what 10.0.0.2 is kept for, for node "owner".
		pool func() (*ippoolv1.NodeIPPool, *ippool.Allocator)
		// carried and reserved are what a full pool tells an asker of
		// another node of what it may not have.
		carried, reserved int
	}{
		{"reserved", func() (*ippoolv1.NodeIPPool, *ippool.Allocator) {
			return testPool(ippoolv1.Reservation{IP: "10.0.0.2", Node: "owner"})
		}, 0, 1},
		{"quarantined for its return", func() (*ippoolv1.NodeIPPool, *ippool.Allocator) {
			p, alloc := testPool()
			if err := alloc.AllocateIP(mustAddr("10.0.0.2")); err != nil {
				t.Fatal(err)
			}
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.2", Node: "owner", Holder: "owner.policy", Capture: "addr", Since: since})
			return p, alloc
		}, 0, 0},
		{"kept for its return", func() (*ippoolv1.NodeIPPool, *ippool.Allocator) {
			p, alloc := testPool()
			poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.2", Node: "owner", Holder: "owner.policy", Capture: "addr", Since: since})
			return p, alloc
		}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, alloc := tc.pool()
			c := New(p, alloc)
			c.Avoid(map[netip.Addr][]string{mustAddr("10.0.0.2"): {"intruder"}})
			tk, err := c.Take(asker("owner", nil), "addr")
			if err != nil || tk.IP.String() == "10.0.0.2" {
				t.Fatalf("owner got %v, %v while node intruder carries 10.0.0.2; want another address", tk.IP, err)
			}
			for _, other := range []Asker{asker("fresh", nil), {Holder: holder.ForClaim("ns", "claim")}} {
				for {
					tk, err := c.Take(other, "addr")
					if errors.Is(err, ippool.ErrFull) {
						break
					}
					if err != nil || tk.IP.String() == "10.0.0.2" {
						t.Fatalf("%s got %v, %v while node intruder carries 10.0.0.2", other.Holder, tk.IP, err)
					}
				}
			}
			var full *FullError
			if _, err := c.Take(asker("fresh", nil), "addr"); !errors.As(err, &full) || full.Carried != tc.carried || full.Reserved != tc.reserved {
				t.Fatalf("a full pool for another node: %v, want ErrFull counting %d carried, %d reserved", err, tc.carried, tc.reserved)
			}
			if _, err := c.Take(asker("owner", nil), "addr"); !errors.As(err, &full) || full.Carried != 1 || full.Reserved != 0 {
				t.Fatalf("a full pool for owner: %v, want ErrFull counting its own address as carried, none reserved", err)
			}
			c.Done()

			p, alloc = tc.pool()
			c = New(p, alloc)
			c.Avoid(map[netip.Addr][]string{mustAddr("10.0.0.2"): {"owner"}})
			if tk, err := c.Take(asker("owner", nil), "addr"); err != nil || tk.IP.String() != "10.0.0.2" {
				t.Fatalf("owner, which carries 10.0.0.2 itself, got %v, %v; want it", tk.IP, err)
			}
			c.Done()

			// Both carry it: the owner does not adopt it either, and is
			// told why; nothing about it is for the records to settle.
			p, alloc = tc.pool()
			c = New(p, alloc)
			c.Avoid(map[netip.Addr][]string{mustAddr("10.0.0.2"): {"owner", "intruder"}})
			both := asker("owner", nil)
			both.Carried = func(string) []Carried { return []Carried{{IP: mustAddr("10.0.0.2"), Interface: "eth1"}} }
			tk, err = c.Take(both, "addr")
			if err != nil || tk.IP.String() == "10.0.0.2" || tk.Unconfirmed() ||
				!slices.Equal(tk.notAdopted, []string{"10.0.0.2 on eth1 (node intruder carries it too)"}) {
				t.Fatalf("owner, which carries 10.0.0.2 as intruder does, got %v (not adopted %q, unconfirmed %v), %v",
					tk.IP, tk.notAdopted, tk.Unconfirmed(), err)
			}
			c.Done()
		})
	}
}

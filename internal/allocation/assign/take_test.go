package assign

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestTakeAllOrNone: an ask whose captures do not all find an address
// takes none, and leaves the pool as it was: its quarantine entry is back
// for the holder's return, no bit and no in-flight entry stays. An ask
// that is served holds each address by an in-flight entry under its
// holder and token, naming the quarantine a returned address came from;
// every kind of holder is named as entries name it.
func TestTakeAllOrNone(t *testing.T) {
	p, alloc := testPool() // hands out 10.0.0.2-10.0.0.6 but 10.0.0.5
	for _, s := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		if err := alloc.AllocateIP(mustAddr(s)); err != nil {
			t.Fatal(err)
		}
	}
	q := ippoolv1.QuarantinedAddress{IP: "10.0.0.4", Node: "back", Holder: "back.policy", Capture: "a"}
	poolstatus.AddQuarantine(p, q)
	before := p.DeepCopy()

	since := metav1.Unix(1_700_000_000, 0)
	back := Ask{Asker: asker("back", nil), Captures: []string{"a", "b", "c"}, Token: "7"}
	c := New(p, alloc)
	taken, got, err := c.TakeAll(back, since)
	c.Done()
	if !errors.Is(err, ippool.ErrFull) || taken != nil || got != 2 {
		t.Fatalf("three captures from two addresses (one its own return): %v, %d taken before, %v; want ErrFull after 2", taken, got, err)
	}
	if !reflect.DeepEqual(p.Status, before.Status) || alloc.Count() != 3 || !alloc.HasIP(mustAddr("10.0.0.4")) || alloc.HasIP(mustAddr("10.0.0.6")) {
		t.Fatalf("a refused ask changed the pool: %+v, %d bits (want %+v, 3 bits)", p.Status, alloc.Count(), before.Status)
	}

	back.Captures = []string{"a", "b"}
	c = New(p, alloc)
	taken, got, err = c.TakeAll(back, since)
	c.Done()
	if err != nil || got != 2 || taken[0].IP != mustAddr("10.0.0.4") || taken[1].IP != mustAddr("10.0.0.6") {
		t.Fatalf("two captures: %v, %d, %v; want its return 10.0.0.4 for a, then 10.0.0.6", taken, got, err)
	}
	want := []ippoolv1.InFlightAddress{
		{IP: "10.0.0.4", Holder: "back.policy", Token: "7", Since: since, Returning: &q},
		{IP: "10.0.0.6", Holder: "back.policy", Token: "7", Since: since},
	}
	if !reflect.DeepEqual(p.Status.InFlight, want) || poolstatus.QuarantineOf(p, "10.0.0.4") != nil {
		t.Errorf("in-flight entries %+v, quarantined %+v; want %+v and no quarantine", p.Status.InFlight, p.Status.Quarantined, want)
	}

	claim := Ask{Asker: Asker{Holder: holder.ForClaim("tenant", "m-0")}, Captures: []string{""}, Token: "uid"}
	c = New(p, alloc)
	_, _, err = c.TakeAll(claim, since)
	c.Done()
	if !errors.Is(err, ippool.ErrFull) {
		t.Fatalf("a claim from a full pool: %v", err)
	}
	_ = alloc.ReleaseIP(mustAddr("10.0.0.2"))
	c = New(p, alloc)
	taken, _, err = c.TakeAll(claim, since)
	c.Done()
	if err != nil || taken[0].IP != mustAddr("10.0.0.2") || poolstatus.InFlightOf(p, "10.0.0.2").HolderName() != "IPAddressClaim/tenant/m-0" {
		t.Errorf("a claim: %v, %v, entries %+v", taken, err, p.Status.InFlight)
	}
}

// TestServeResumesOrTakes is the rule by which every kind of holder is
// served, run for each kind: an ask whose holder has in-flight entries
// of its own gets their addresses back and takes nothing new. For a kind
// with one writer, they are its entries under its token (not an address
// quarantined since, nor one its record holds already); entries under
// another token are dead (their writer is fenced by the token). Every
// entry of an enactment is its own: its writers take under tokens that
// may be ahead of each other's caches. A pool that may not hand out addresses refuses what must be
// taken, but still gives back what is resumed; a full pool refuses the
// whole ask.
func TestServeResumesOrTakes(t *testing.T) {
	since := metav1.Unix(1_700_000_000, 0)
	for kind, h := range map[string]holder.Ref{
		"enactment":  holder.ForEnactment("n1.policy"),
		"policyNode": holder.ForPolicyNode("pooled", "n1"),
		"claim":      holder.ForClaim("tenant", "m-0"),
	} {
		severalWriters := h.Kind == holder.Enactment
		t.Run(kind, func(t *testing.T) {
			available := func() (*ippoolv1.NodeIPPool, *ippool.Allocator) {
				p, alloc := testPool() // hands out 10.0.0.2-10.0.0.6 but 10.0.0.5
				p.Status.Conditions = []metav1.Condition{{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "ReconciledPool"}}
				return p, alloc
			}
			serve := func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, a Ask) (Served, error) {
				c := New(p, alloc)
				defer c.Done()
				return c.Serve(a, since)
			}
			ask := Ask{Asker: Asker{Holder: h}, Captures: []string{"a"}, Token: "7"}
			entry := func(ip, token string) ippoolv1.InFlightAddress {
				return ippoolv1.InFlightAddress{IP: ip, Holder: h.String(), Token: token, Since: since}
			}

			p, alloc := available()
			s, err := serve(p, alloc, ask)
			if err != nil || len(s.Resumed) != 0 || len(s.Taken) != 1 || s.Taken[0].IP != mustAddr("10.0.0.2") ||
				!reflect.DeepEqual(p.Status.InFlight, []ippoolv1.InFlightAddress{entry("10.0.0.2", "7")}) {
				t.Fatalf("a first ask: %+v, %v, entries %+v; want 10.0.0.2 taken under token 7", s, err, p.Status.InFlight)
			}
			before := p.DeepCopy()
			s, err = serve(p, alloc, ask)
			if err != nil || !reflect.DeepEqual(s.Resumed, []netip.Addr{mustAddr("10.0.0.2")}) || len(s.Taken) != 0 ||
				!reflect.DeepEqual(p.Status, before.Status) || alloc.Count() != 1 {
				t.Fatalf("the same ask again (its record not written): %+v, %v; want 10.0.0.2 resumed, the pool unchanged", s, err)
			}

			other := ask
			other.Token = "8"
			s, err = serve(p, alloc, other)
			switch {
			case severalWriters && (err != nil || !reflect.DeepEqual(s.Resumed, []netip.Addr{mustAddr("10.0.0.2")}) || len(s.Taken) != 0):
				t.Fatalf("an enactment's ask under a new token: %+v, %v; want 10.0.0.2 resumed (another writer serves it)", s, err)
			case !severalWriters && (err != nil || len(s.Resumed) != 0 || len(s.Taken) != 1 || s.Taken[0].IP != mustAddr("10.0.0.3")):
				t.Fatalf("an ask under a new token: %+v, %v; want a new address, 10.0.0.3", s, err)
			}

			p, alloc = available()
			_ = alloc.AllocateIP(mustAddr("10.0.0.2"))
			_ = alloc.AllocateIP(mustAddr("10.0.0.3"))
			poolstatus.AddInFlight(p, entry("10.0.0.2", "7"))
			poolstatus.AddInFlight(p, entry("10.0.0.3", "7"))
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.2", Holder: h.String()})
			held := ask
			held.Asker.Holds = func(ip netip.Addr) bool { return ip == mustAddr("10.0.0.3") }
			s, err = serve(p, alloc, held)
			switch {
			case severalWriters && (err != nil || len(s.Resumed) != 1 || len(s.Taken) != 0):
				t.Fatalf("an enactment's entries, quarantined since or recorded: %+v, %v; want them resumed, nothing taken", s, err)
			case !severalWriters && (err != nil || len(s.Resumed) != 0 || len(s.Taken) != 1 || s.Taken[0].IP != mustAddr("10.0.0.4")):
				t.Fatalf("entries quarantined since, or recorded: %+v, %v; want neither resumed, 10.0.0.4 taken", s, err)
			}

			p, alloc = available()
			_ = alloc.AllocateIP(mustAddr("10.0.0.4"))
			poolstatus.AddInFlight(p, entry("10.0.0.4", "7"))
			p.DeletionTimestamp = &since
			s, err = serve(p, alloc, ask)
			if err != nil || !reflect.DeepEqual(s.Resumed, []netip.Addr{mustAddr("10.0.0.4")}) {
				t.Fatalf("a pool being deleted, the holder's entry resumed: %+v, %v", s, err)
			}
			poolstatus.RemoveInFlight(p, "10.0.0.4") // recorded, and pruned
			before = p.DeepCopy()
			var refused *Unservable
			s, err = serve(p, alloc, other)
			if !errors.As(err, &refused) || !strings.Contains(refused.Why, "is being deleted") || len(s.Taken) != 0 ||
				!reflect.DeepEqual(p.Status, before.Status) || alloc.Count() != 1 {
				t.Fatalf("a pool being deleted, a new address: %+v, %v; want refused, the pool unchanged", s, err)
			}
			p.DeletionTimestamp = nil
			p.Status.Conditions = nil
			if _, err := serve(p, alloc, other); !errors.As(err, &refused) || !strings.Contains(refused.Why, "not been reconciled") {
				t.Fatalf("a pool not rebuilt yet: %v; want refused", err)
			}

			p, alloc = available()
			for _, s := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
				_ = alloc.AllocateIP(mustAddr(s))
			}
			two := ask
			two.Captures = []string{"a", "b"}
			before = p.DeepCopy()
			s, err = serve(p, alloc, two)
			if !errors.Is(err, ippool.ErrFull) || len(s.Taken) != 0 || !reflect.DeepEqual(p.Status, before.Status) || alloc.Count() != 3 {
				t.Fatalf("two captures from one free address: %+v, %v; want ErrFull and the pool unchanged", s, err)
			}
		})
	}
}

// TestServeOneKeepsServesOrder: an ask of one named address is served in
// Serve's order. Its holder's own in-flight entry is resumed before the
// named address is looked at; a pool that may not hand out addresses
// refuses before it is; the named address is held by an in-flight entry
// under the ask's token; and take's refusal passes through with the pool
// unchanged.
func TestServeOneKeepsServesOrder(t *testing.T) {
	since := metav1.Unix(1_700_000_000, 0)
	h := holder.ForClaim("tenant", "m-0")
	ask := Ask{Asker: Asker{Holder: h}, Captures: []string{""}, Token: "uid-1"}
	p, alloc := testPool() // hands out 10.0.0.2-10.0.0.6 but 10.0.0.5
	p.Status.Conditions = []metav1.Condition{{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "ReconciledPool"}}
	calls := 0
	takeSix := func() (netip.Addr, error) {
		calls++
		return mustAddr("10.0.0.6"), alloc.AllocateIP(mustAddr("10.0.0.6"))
	}

	s, err := ServeOne(p, ask, since, takeSix)
	want := []ippoolv1.InFlightAddress{{IP: "10.0.0.6", Holder: h.String(), Token: "uid-1", Since: since}}
	if err != nil || len(s.Taken) != 1 || s.Taken[0].IP != mustAddr("10.0.0.6") || !reflect.DeepEqual(p.Status.InFlight, want) {
		t.Fatalf("the named address: %+v, %v, entries %+v; want 10.0.0.6 held under uid-1", s, err, p.Status.InFlight)
	}
	s, err = ServeOne(p, ask, since, takeSix)
	if err != nil || !reflect.DeepEqual(s.Resumed, []netip.Addr{mustAddr("10.0.0.6")}) || calls != 1 {
		t.Fatalf("the same ask again: %+v, %v, take called %d times; want 10.0.0.6 resumed, take not called again", s, err, calls)
	}

	poolstatus.RemoveInFlight(p, "10.0.0.6") // recorded, and pruned
	p.DeletionTimestamp = &since
	before := p.DeepCopy()
	var unservable *Unservable
	if _, err := ServeOne(p, ask, since, takeSix); !errors.As(err, &unservable) || calls != 1 || !reflect.DeepEqual(p.Status, before.Status) {
		t.Fatalf("a pool being deleted: %v, take called %d times; want refused before take, the pool unchanged", err, calls)
	}
	p.DeletionTimestamp = nil

	no := errors.New("reserved for node n2")
	s, err = ServeOne(p, ask, since, func() (netip.Addr, error) { return netip.Addr{}, no })
	if !errors.Is(err, no) || len(s.Taken) != 0 || !reflect.DeepEqual(p.Status, before.Status) {
		t.Fatalf("a refused address: %+v, %v; want take's error, the pool unchanged", s, err)
	}
}

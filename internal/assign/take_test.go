package assign

import (
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
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
	back := Ask{Claimant: claimant("back", nil), Captures: []string{"a", "b", "c"}, Token: "7"}
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

	claim := Ask{Claimant: Claimant{Holder: holder.ForClaim("tenant", "m-0")}, Captures: []string{""}, Token: "uid"}
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

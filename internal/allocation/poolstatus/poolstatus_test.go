package poolstatus

import (
	"net/netip"
	"testing"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestOutside: an address the range still hands out needs nothing; one
// outside the CIDR, before the start, or excluded is named with the
// capture, the pool and the range that replace it.
func TestOutside(t *testing.T) {
	rng, err := ippool.NewRange(ippool.Spec{CIDR: "10.9.0.0/24", Start: "10.9.0.10", End: "10.9.0.20", Exclude: []string{"10.9.0.15"}})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]string{
		"10.9.0.10": "",
		"10.9.0.20": "",
		"10.9.0.15": `capture addr: 10.9.0.15 is no longer handed out by NodeIPPool "p" (` + rng.String() + ")",
		"10.9.0.9":  `capture addr: 10.9.0.9 is no longer handed out by NodeIPPool "p" (` + rng.String() + ")",
		"10.8.0.12": `capture addr: 10.8.0.12 is no longer handed out by NodeIPPool "p" (` + rng.String() + ")",
	} {
		if got := Outside("p", rng, "addr", netip.MustParseAddr(ip)); got != want {
			t.Errorf("Outside(%s) = %q, want %q", ip, got, want)
		}
	}
}

// TestUnrecordedPutsBackOnlyItsOwnOrigin: an entry given back unrecorded
// goes back to the quarantine or the kept entry it names when that is of
// its own address; one naming another address's plants nothing there.
func TestUnrecordedPutsBackOnlyItsOwnOrigin(t *testing.T) {
	p := &ippoolv1.NodeIPPool{}
	held := ippoolv1.QuarantinedAddress{IP: "10.0.0.4", Node: "w1"}
	AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.4", Holder: "w1.a", Token: "1", Returning: &held})
	AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.8", Holder: "w1.a", Token: "1",
		Returning: &ippoolv1.QuarantinedAddress{IP: "10.0.0.2", Node: "w1"}, Kept: &ippoolv1.KeptAddress{IP: "10.0.0.3", Node: "w2"}})
	if Unrecorded(p, "10.0.0.4") || QuarantineOf(p, "10.0.0.4") == nil {
		t.Errorf("10.0.0.4 did not go back to the hold it came from: %+v", p.Status.Quarantined)
	}
	if !Unrecorded(p, "10.0.0.8") {
		t.Error("10.0.0.8, which came from no quarantine of its own, keeps its bit")
	}
	if QuarantineOf(p, "10.0.0.2") != nil || KeptOf(p, "10.0.0.3") != nil {
		t.Errorf("an entry planted what it named of other addresses: %+v %+v", p.Status.Quarantined, p.Status.KeptForReturn)
	}
}

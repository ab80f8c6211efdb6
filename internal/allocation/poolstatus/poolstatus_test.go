package poolstatus

import (
	"net/netip"
	"testing"

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

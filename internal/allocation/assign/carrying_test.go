package assign

import (
	"net/netip"
	"slices"
	"testing"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// TestAdopting: the one view every kind adopts from completes an asker
// with what its node carries on each capture's interfaces, what other
// nodes carry, and what the node's records hold.
func TestAdopting(t *testing.T) {
	c := Carrying{ByNode: map[string]map[netip.Addr]string{
		"n1": {mustAddr("10.1.0.11"): "eth1", mustAddr("10.1.0.12"): "eth2"},
		"n2": {},
	}}
	c.Hold("n1", ippoolv1.EnactmentIPPools{"other": {Allocated: []string{"10.1.0.12"}, Releasing: []string{"10.1.0.13"}}})
	ifaces := func(captureName string) []string {
		if captureName == "had" {
			return nil
		}
		return []string{"eth1"}
	}

	own := func(ip netip.Addr) bool { return ip == mustAddr("10.1.0.14") }
	cl := c.Adopting(Asker{Node: "n1", Holds: own}, ifaces)
	if got := cl.Carried("addr"); !slices.Equal(got, []Carried{{IP: mustAddr("10.1.0.11"), Interface: "eth1"}}) {
		t.Errorf("Carried(addr) = %v, want 10.1.0.11 on eth1 only", got)
	}
	if got := cl.Carried("had"); got != nil {
		t.Errorf("Carried(had) = %v, want nothing: no interface to adopt on", got)
	}
	for ip, want := range map[string]bool{"10.1.0.12": true, "10.1.0.13": true, "10.1.0.14": true, "10.1.0.11": false} {
		if got := cl.Holds(mustAddr(ip)); got != want {
			t.Errorf("Holds(%s) = %v, want %v (the node's records, and what the asker said)", ip, got, want)
		}
	}
	if cl.CarriedElsewhere != nil {
		t.Error("CarriedElsewhere set without knowing what other nodes carry")
	}

	c.Carriers = map[netip.Addr][]string{mustAddr("10.1.0.11"): {"n1", "n3"}}
	cl = c.Adopting(Asker{Node: "n1"}, ifaces)
	if got := cl.CarriedElsewhere(mustAddr("10.1.0.11")); got != "n3" {
		t.Errorf("CarriedElsewhere(10.1.0.11) = %q, want n3", got)
	}
	if cl.Holds(mustAddr("10.1.0.14")) {
		t.Error("Holds(10.1.0.14) without the asker's own rule")
	}

	if got := c.Adopting(Asker{Node: "n2"}, ifaces).Carried("addr"); len(got) != 0 {
		t.Errorf("n2 carries nothing: Carried = %v", got)
	}
	if cl := c.Adopting(Asker{Node: "n9"}, ifaces); cl.Carried != nil || cl.Holds != nil {
		t.Error("a node without a state adopts nothing and is left as it was")
	}
}

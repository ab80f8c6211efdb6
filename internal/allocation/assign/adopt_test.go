package assign

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// carrying is an asker whose node carries addrs on eth1, the interface
// every capture's template configures, while elsewhere carry the others.
func carrying(node string, elsewhere map[string]string, addrs ...string) Asker {
	cl := asker(node, nil)
	cl.Carried = func(string) []Carried {
		var out []Carried
		for _, a := range addrs {
			out = append(out, Carried{IP: mustAddr(a), Interface: "eth1"})
		}
		return out
	}
	cl.CarriedElsewhere = func(ip netip.Addr) string { return elsewhere[ip.String()] }
	return cl
}

func adoptionPool(t *testing.T) (*ippoolv1.NodeIPPool, *ippool.Allocator) {
	t.Helper()
	p := &ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{
		Range:        ippoolv1.IPRange{CIDR: "10.1.0.0/24", Start: "10.1.0.10", End: "10.1.0.30", Exclude: []string{"10.1.0.20"}},
		Gateway:      "10.1.0.30",
		Reservations: []ippoolv1.Reservation{{IP: "10.1.0.25", Node: "pinned"}},
	}}
	rng, err := poolstatus.Range(p)
	if err != nil {
		t.Fatal(err)
	}
	alloc := ippool.NewAllocator(rng)
	// 10.1.0.16 was found on node02 unrecorded (a stray); 10.1.0.18 was
	// released from gone.policy on node09 and waits for evidence.
	for _, ip := range []string{"10.1.0.16", "10.1.0.18"} {
		if err := alloc.AllocateIP(mustAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.1.0.16", Node: "node02"})
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.1.0.18", Node: "node09", Holder: "node09.gone"})
	// 10.1.0.19 and 10.1.0.24 are in flight, to node07.policy (an earlier
	// incarnation of it: another token) and to node08.policy.
	// 10.1.0.27 is in flight to node10.policy and quarantined for its
	// release: its own address, on its way back.
	for ip, h := range map[string]string{"10.1.0.19": "node07.policy", "10.1.0.24": "node08.policy", "10.1.0.27": "node10.policy"} {
		if err := alloc.AllocateIP(mustAddr(ip)); err != nil {
			t.Fatal(err)
		}
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: ip, Holder: holder.ForEnactment(h).String(), Token: "earlier"})
	}
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.1.0.27", Node: "node10", Holder: "node10.policy", Capture: "other"})
	return p, alloc
}

func TestAdoption(t *testing.T) {
	p, alloc := adoptionPool(t)
	c := New(p, alloc)
	elsewhere := map[string]string{"10.1.0.17": "node05"}
	tests := []struct {
		name       string
		cl         Asker
		capture    string
		want       string
		adopted    bool
		notAdopted []string
		// unconfirmed: a refusal only the records can settle (set, no
		// entry: Taken.Unconfirmed).
		unconfirmed bool
	}{
		{name: "a free address no one else carries", cl: carrying("node01", elsewhere, "10.1.0.15"), want: "10.1.0.15", adopted: true},
		{name: "the stray the pool holds for the node", cl: carrying("node02", elsewhere, "10.1.0.16"), want: "10.1.0.16", adopted: true},
		{name: "the lowest of several, link-local and other families aside",
			cl:   carrying("node03", elsewhere, "10.1.0.29", "fe80::1", "2001:db8::5", "10.1.0.28"),
			want: "10.1.0.28", adopted: true},
		{name: "nothing it carries can be given", capture: "addr",
			cl:   carrying("node04", elsewhere, "10.1.0.20", "10.1.0.40", "10.1.0.17", "10.1.0.25", "10.1.0.18", "10.1.0.30", "10.1.0.15"),
			want: "10.1.0.10",
			notAdopted: []string{
				"10.1.0.15 on eth1 (another holder has it)",
				"10.1.0.17 on eth1 (node node05 carries it too)",
				"10.1.0.18 on eth1 (it was released from node09.gone and is quarantined until node node09 shows it gone)",
				"10.1.0.20 on eth1 (it is excluded from the range 10.1.0.10-10.1.0.30)",
				"10.1.0.25 on eth1 (it is reserved for node pinned)",
				"10.1.0.30 on eth1 (it is the pool's gateway)",
				"10.1.0.40 on eth1 (it is outside the range 10.1.0.10-10.1.0.30)",
			},
			unconfirmed: true},
		{name: "in flight to the node's own holder, under another token", cl: carrying("node07", elsewhere, "10.1.0.19"), want: "10.1.0.11",
			notAdopted: []string{"10.1.0.19 on eth1 (it is being handed to node07.policy)"}, unconfirmed: true},
		{name: "in flight to another holder", cl: carrying("node07", elsewhere, "10.1.0.24"), want: "10.1.0.12",
			notAdopted: []string{"10.1.0.24 on eth1 (it is being handed to node08.policy)"}},
		{name: "in flight to the node's own holder and quarantined for its release", cl: carrying("node10", elsewhere, "10.1.0.27"),
			want: "10.1.0.13", notAdopted: []string{"10.1.0.27 on eth1 (it is being handed to node10.policy)"}},
		{name: "the reservation for the node comes first", cl: carrying("pinned", elsewhere, "10.1.0.21"), want: "10.1.0.25"},
		{name: "first capture of a node carrying two", cl: carrying("node06", elsewhere, "10.1.0.22", "10.1.0.23"), capture: "a", want: "10.1.0.22", adopted: true},
		{name: "second capture of that node", cl: carrying("node06", elsewhere, "10.1.0.22", "10.1.0.23"), capture: "b", want: "10.1.0.23", adopted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capture := tt.capture
			if capture == "" {
				capture = "addr"
			}
			tk, err := c.Take(tt.cl, capture)
			if err != nil {
				t.Fatal(err)
			}
			var n Notes
			n.Add(tk, capture)
			if tk.IP.String() != tt.want || (len(n.Adopted) > 0) != tt.adopted || !reflect.DeepEqual(n.NotAdopted, tt.notAdopted) {
				t.Errorf("took %s, adopted %v, not adopted %q; want %s, %v, %q", tk.IP, n.Adopted, n.NotAdopted, tt.want, tt.adopted, tt.notAdopted)
			}
			if tk.Unconfirmed() != tt.unconfirmed {
				t.Errorf("Unconfirmed() = %v, want %v", tk.Unconfirmed(), tt.unconfirmed)
			}
		})
	}
	if q := poolstatus.QuarantineOf(p, "10.1.0.16"); q != nil {
		t.Errorf("the adopted stray is still quarantined: %+v", q)
	}
	c.Done()
	for _, ip := range []string{"10.1.0.15", "10.1.0.16", "10.1.0.22", "10.1.0.23", "10.1.0.28", "10.1.0.10", "10.1.0.25"} {
		if !alloc.HasIP(mustAddr(ip)) {
			t.Errorf("%s was handed out but is not allocated", ip)
		}
	}
	for _, ip := range []string{"10.1.0.17", "10.1.0.21", "10.1.0.29"} {
		if alloc.HasIP(mustAddr(ip)) {
			t.Errorf("%s was not handed out but is allocated", ip)
		}
	}
}

// TestOwnAddressesAreNotReported: what the node holds under another
// record, or releases, is neither adopted nor reported.
func TestOwnAddressesAreNotReported(t *testing.T) {
	p, alloc := adoptionPool(t)
	if err := alloc.AllocateIP(mustAddr("10.1.0.12")); err != nil {
		t.Fatal(err)
	}
	c := New(p, alloc)
	cl := carrying("node09", nil, "10.1.0.12", "10.1.0.18")
	cl.Holds = func(ip netip.Addr) bool { return ip == mustAddr("10.1.0.12") }
	tk, err := c.Take(cl, "addr")
	if err != nil {
		t.Fatal(err)
	}
	var n Notes
	n.Add(tk, "addr")
	if tk.IP.String() != "10.1.0.10" || len(n.Adopted)+len(n.NotAdopted) > 0 {
		t.Errorf("took %s, notes %+v; want 10.1.0.10 and nothing to tell", tk.IP, n)
	}
}

func TestAdoptionNeedsOtherNodes(t *testing.T) {
	p, alloc := adoptionPool(t)
	c := New(p, alloc)
	cl := carrying("node02", nil, "10.1.0.15", "10.1.0.16")
	cl.CarriedElsewhere = nil
	// Without the other nodes' states a free address is not adopted, but
	// the stray the pool holds for the node is.
	tk, err := c.Take(cl, "addr")
	if err != nil || tk.IP.String() != "10.1.0.16" {
		t.Fatalf("took %v (%v), want the stray 10.1.0.16", tk.IP, err)
	}
}

func TestGiveUndoesAdoption(t *testing.T) {
	p, alloc := adoptionPool(t)
	before := p.DeepCopy()
	c := New(p, alloc)
	stray, err := c.Take(carrying("node02", nil, "10.1.0.16"), "addr")
	if err != nil {
		t.Fatal(err)
	}
	free, err := c.Take(carrying("node01", map[string]string{}, "10.1.0.15"), "addr")
	if err != nil {
		t.Fatal(err)
	}
	c.Give(free)
	c.Give(stray)
	c.Done()
	byIP := func(a, b ippoolv1.QuarantinedAddress) int { return strings.Compare(a.IP, b.IP) }
	slices.SortFunc(p.Status.Quarantined, byIP)
	slices.SortFunc(before.Status.Quarantined, byIP)
	if !reflect.DeepEqual(p.Status, before.Status) {
		t.Errorf("status after Give: %+v, want %+v", p.Status, before.Status)
	}
	if alloc.HasIP(mustAddr("10.1.0.15")) || !alloc.HasIP(mustAddr("10.1.0.16")) {
		t.Errorf("Give left 10.1.0.15 allocated or freed the stray 10.1.0.16")
	}
	// Given back, 10.1.0.15 may be adopted again.
	again, err := New(p, alloc).Take(carrying("node01", map[string]string{}, "10.1.0.15"), "addr")
	if err != nil || again.IP.String() != "10.1.0.15" {
		t.Errorf("adopting again after Give: %v (%v)", again.IP, err)
	}
	if !strings.Contains(AdoptedMessage("p", []string{"10.1.0.15 on eth1"}), "adopted 10.1.0.15 on eth1: the node already carried it") {
		t.Errorf("AdoptedMessage: %s", AdoptedMessage("p", []string{"10.1.0.15 on eth1"}))
	}
}

// TestAvoidCarriedAddresses: a free address some node's network carries,
// which no record holds, goes to no other asker: the lowest free
// address passes it by, and only its carrier adopts it; one two nodes
// carry goes to neither. Given back, an adopted one is avoided again, and
// Done frees what was avoided. A pool with only such addresses left is
// full, and says why.
func TestAvoidCarriedAddresses(t *testing.T) {
	p := &ippoolv1.NodeIPPool{Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.2.0.0/24", Start: "10.2.0.10", End: "10.2.0.14"}}}
	rng, err := poolstatus.Range(p)
	if err != nil {
		t.Fatal(err)
	}
	alloc := ippool.NewAllocator(rng)
	carriers := map[netip.Addr][]string{mustAddr("10.2.0.10"): {"node01"}, mustAddr("10.2.0.11"): {"node02", "node03"},
		mustAddr("10.9.0.1"): {"node04"}} // outside the range: nothing to avoid
	elsewhere := func(node string) map[string]string {
		out := map[string]string{}
		for ip, nodes := range carriers {
			for _, n := range nodes {
				if n != node {
					out[ip.String()] = n
				}
			}
		}
		return out
	}
	c := New(p, alloc)
	c.Avoid(carriers)
	fresh, err := c.Take(carrying("node05", elsewhere("node05")), "addr")
	if err != nil || fresh.IP.String() != "10.2.0.12" {
		t.Fatalf("a node that carries nothing took %v (%v), want 10.2.0.12: .10 and .11 are on other nodes' networks", fresh.IP, err)
	}
	both, err := c.Take(carrying("node02", elsewhere("node02"), "10.2.0.11"), "addr")
	if err != nil || both.IP.String() != "10.2.0.13" {
		t.Errorf("node02, which carries .11 with node03, took %v (%v), want 10.2.0.13", both.IP, err)
	}
	own, err := c.Take(carrying("node01", elsewhere("node01"), "10.2.0.10"), "addr")
	if err != nil || own.IP.String() != "10.2.0.10" {
		t.Fatalf("node01 took %v (%v), want 10.2.0.10, the address it carries", own.IP, err)
	}
	c.Give(own)
	if _, err := c.Take(carrying("node06", elsewhere("node06")), "addr"); err != nil {
		t.Fatalf("node06 should get 10.2.0.14: %v", err)
	}
	_, err = c.Take(carrying("node07", elsewhere("node07")), "addr")
	var full *FullError
	if !errors.Is(err, ippool.ErrFull) || !errors.As(err, &full) || full.Carried != 2 ||
		full.More() != "2 more are carried by nodes' networks and recorded by no holder" {
		t.Errorf("a pool with only carried addresses left: %v", err)
	}
	c.Done()
	for _, ip := range []string{"10.2.0.10", "10.2.0.11"} {
		if alloc.HasIP(mustAddr(ip)) {
			t.Errorf("Done left %s allocated", ip)
		}
	}
}

// TestAdoptedHoldGoesBackUnrecorded: the in-flight entry of an address
// adopted from the hold the pool keeps for its node names that hold, so
// that the address, withdrawn or revoked before it is recorded, is held
// for the node again, its bit set, instead of freed while the node still
// carries it.
func TestAdoptedHoldGoesBackUnrecorded(t *testing.T) {
	p, alloc := adoptionPool(t)
	c := New(p, alloc)
	tk, err := c.Take(carrying("node02", nil, "10.1.0.16"), "addr")
	if err != nil || tk.IP.String() != "10.1.0.16" {
		t.Fatalf("took %v (%v), want the address held for node02", tk.IP, err)
	}
	poolstatus.AddInFlight(p, tk.InFlight(asker("node02", nil).Holder, "7", p.CreationTimestamp))
	c.Done()
	if poolstatus.QuarantineOf(p, "10.1.0.16") != nil {
		t.Fatal("the adopted address is still held")
	}
	if poolstatus.Unrecorded(p, "10.1.0.16") {
		t.Error("Unrecorded lets the bit of an adopted hold be cleared")
	}
	if q := poolstatus.QuarantineOf(p, "10.1.0.16"); q == nil || q.Node != "node02" || q.HolderName() != "" {
		t.Errorf("after Unrecorded, 10.1.0.16 is quarantined as %+v, want held for node02 again", q)
	}
}

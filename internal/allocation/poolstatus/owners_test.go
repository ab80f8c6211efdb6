package poolstatus

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

func enactment(node, policy string, record ippoolv1.EnactmentIPPools, captured map[string]string, desired string) nncev1beta1.NodeNetworkConfigurationEnactment {
	e := nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: node + "." + policy,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: policy}}}
	e.Status.IPPool = record
	if len(captured) > 0 {
		e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{}
		for name, state := range captured {
			e.Status.CapturedStates[name] = shared.NodeNetworkConfigurationEnactmentCapturedState{State: shared.NewState(state)}
		}
	}
	e.Status.DesiredState = shared.NewState(desired)
	return e
}

func TestOwnersOf(t *testing.T) {
	enactments := []nncev1beta1.NodeNetworkConfigurationEnactment{
		enactment("n2", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "junk"}}}, nil,
			"interfaces:\n- name: eth2\n  ipv4:\n    address:\n    - ip: 10.0.0.1\n"),
		enactment("n1", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "fd00::5"}}, "b": {Allocated: []string{"10.1.0.1"}}},
			map[string]string{"v4": "ip: 10.0.0.1\nprefix-length: 24\n", "v6": `{"ip":"fd00::5","prefix-length":64}`},
			"interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: 10.0.0.1\n  ipv6:\n    address:\n    - ip: fd00::5\n"),
	}
	got := OwnersOf("a", nil, holder.OfEnactments(enactments))
	want := Owners{
		netip.MustParseAddr("10.0.0.1"): {
			{Holder: holder.ForEnactment("n1.p"), Pool: "a", Node: "n1", Policy: "p", Capture: "v4", Interface: "eth1"},
			{Holder: holder.ForEnactment("n2.p"), Pool: "a", Node: "n2", Policy: "p", Interface: "eth2"},
		},
		netip.MustParseAddr("fd00::5"): {{Holder: holder.ForEnactment("n1.p"), Pool: "a", Node: "n1", Policy: "p", Capture: "v6", Interface: "eth1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("claims\n got %+v\nwant %+v", got, want)
	}
	if s := want[netip.MustParseAddr("10.0.0.1")][0].String(); s != "node n1 and interface eth1 (enactment n1.p)" {
		t.Errorf("owner reads %q", s)
	}
	// Holders finds the same owners, and names where they use the address
	// only when described.
	holders := Holders("a", nil, holder.OfEnactments(enactments))
	for ip, owners := range want {
		if len(holders[ip]) != len(owners) {
			t.Fatalf("holders of %s: %+v, want %+v", ip, holders[ip], owners)
		}
		for i, o := range owners {
			h := holders[ip][i]
			if h.Holder != o.Holder || h.Pool != o.Pool || h.Node != o.Node || h.Capture != "" || h.Interface != "" {
				t.Errorf("holder %+v, want %+v without capture and interface", h, o)
			}
			if h.String() != o.String() || h.Describe("z") != o.Describe("z") {
				t.Errorf("holder reads %q, want %q", h.String(), o.String())
			}
		}
	}
	// With its range, pool "c" (10.1.0.0/24) also sees what n1 records
	// under "b": uniqueness is cluster-wide, whatever the pool's name.
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.1.0.0/24"})
	cross := OwnersOf("c", rng, holder.OfEnactments(enactments))
	if owners := cross[netip.MustParseAddr("10.1.0.1")]; len(cross) != 1 || len(owners) != 1 || owners[0].Pool != "b" {
		t.Errorf("cross-pool claims %+v, want 10.1.0.1 held by n1.p under pool b", cross)
	}
	if s := (Owner{Holder: holder.ForEnactment("x"), Capture: "c"}).String(); s != "node ? and capture c (enactment x)" {
		t.Errorf("owner without node and interface reads %q", s)
	}
	if s := (Owner{Holder: holder.ForEnactment("x"), Pool: "b", Node: "n"}).Describe("a"); s != "node n (enactment x, NodeIPPool b)" {
		t.Errorf("owner of another pool reads %q", s)
	}
}

func TestAuditPool(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10", Exclude: []string{"10.0.0.5"}})
	alloc := ippool.NewAllocator(rng)
	for _, off := range []uint64{0, 1, 8} { // .1 .2 .9
		_ = alloc.Allocate(off)
	}
	claims := OwnersOf("a", rng, holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{
		enactment("n1", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "10.0.0.3"}}}, nil, ""),
		enactment("n2", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "10.0.0.5", "10.0.0.42"}}}, nil, ""),
		// Another pool's record of an address this range excludes is no
		// claim on this bitmap and not "outside" either.
		enactment("n3", "p", ippoolv1.EnactmentIPPools{"z": {Allocated: []string{"10.0.0.5"}}}, nil, ""),
	}))
	got := AuditPool("a", alloc, claims)
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	want := Audit{Missing: addrs("10.0.0.3"), Unclaimed: []uint64{1, 8}, UnclaimedCount: 2, Outside: addrs("10.0.0.5", "10.0.0.42"),
		Collisions: addrs("10.0.0.1", "10.0.0.5")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("audit\n got %+v\nwant %+v", got, want)
	}
	if got.Consistent() || !(Audit{}).Consistent() {
		t.Error("Consistent is wrong")
	}
	msg := CollisionMessage("a", claims, got.Collisions)
	if want := "The IP address 10.0.0.1 at node n1 (enactment n1.p) is colliding with node n2 (enactment n2.p); " +
		"The IP address 10.0.0.5 at node n2 (enactment n2.p) is colliding with node n3 (enactment n3.p, NodeIPPool z); " +
		"reset all but one holder, e.g. kubectl annotate nnce n3.p nmstate.io/reset-ippool=z"; msg != want {
		t.Errorf("collision message\n got %s\nwant %s", msg, want)
	}
}

// TestAuditHugeRun: a bitmap that passes validation but sets a run of 2^40
// offsets is audited in time that grows with its runs, not its offsets.
func TestAuditHugeRun(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "fd00::/64"})
	alloc := ippool.NewAllocator(rng)
	huge := encodeRun(t, rng, 5, 1<<40)
	if err := alloc.Restore(huge); err != nil {
		t.Fatal(err)
	}
	claims := Owners{}
	for _, off := range []uint64{5, 7} {
		ip, _ := rng.IP(off)
		claims[ip] = []Owner{{Holder: holder.ForEnactment("e"), Pool: "p"}}
	}
	got := AuditPool("p", alloc, claims)
	if got.UnclaimedCount != 1<<40-2 || len(got.Unclaimed) != MaxUnclaimedListed || got.Unclaimed[0] != 6 || got.Unclaimed[1] != 8 {
		t.Errorf("unclaimed count %d, listed %d starting %v", got.UnclaimedCount, len(got.Unclaimed), got.Unclaimed[:2])
	}
}

// encodeRun returns the snapshot of one run of n offsets from first.
func encodeRun(t *testing.T, rng *ippool.Range, first, n uint64) string {
	t.Helper()
	a := ippool.NewAllocator(rng)
	if err := a.AllocateRun(first, first+n-1); err != nil {
		t.Fatal(err)
	}
	return a.Snapshot()
}

func TestStamp(t *testing.T) {
	p := &ippoolv1.NodeIPPool{}
	p.UID = "uid-1"
	p.Status.AllocatedOffsets = "AQID"
	if Vouched(p) {
		t.Error("a status without a stamp is vouched")
	}
	p.Status.Stamp = Stamp(p)
	if !Vouched(p) {
		t.Error("a stamped status is not vouched")
	}
	for name, edit := range map[string]func(*ippoolv1.NodeIPPool){
		"bitmap emptied":      func(p *ippoolv1.NodeIPPool) { p.Status.AllocatedOffsets = "" },
		"copied to a new UID": func(p *ippoolv1.NodeIPPool) { p.UID = "uid-2" },
		"entry removed":       func(p *ippoolv1.NodeIPPool) { p.Status.InFlight = []ippoolv1.InFlightAddress{{IP: "10.0.0.1"}} },
		"quarantine added":    func(p *ippoolv1.NodeIPPool) { AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.2"}) },
	} {
		q := p.DeepCopy()
		edit(q)
		if Vouched(q) {
			t.Errorf("%s: still vouched", name)
		}
	}
	q := p.DeepCopy()
	q.Status.Allocated, q.Status.Conditions = 7, nil
	if !Vouched(q) {
		t.Error("counts and conditions are not part of the stamp")
	}
}

// TestUnrecognizedHoldAgainstNobody: an unrecognized IPAddress's record
// keeps its bit claimed (it is no leak to collect) and is no collision,
// outside address or recognized owner; it reads as the IPAddress it is.
func TestUnrecognizedHoldAgainstNobody(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10"})
	alloc := ippool.NewAllocator(rng)
	for _, off := range []uint64{0, 1} { // .1 .2
		_ = alloc.Allocate(off)
	}
	unrecognized := func(name, ip string) holder.Record {
		return holder.Record{Holder: holder.ForIPAddress("t", name), Pools: ippoolv1.EnactmentIPPools{"a": {Allocated: []string{ip}}}}
	}
	n1 := enactment("n1", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}}, nil, "")
	claims := Holders("a", rng, []holder.Record{
		holder.OfEnactment(&n1),
		unrecognized("steal", "10.0.0.1"),
		unrecognized("steal-too", "10.0.0.1"),
		unrecognized("squat", "10.0.0.2"),
		unrecognized("far", "10.0.0.77"),
		unrecognized("new", "10.0.0.3"),
	})
	if got := AuditPool("a", alloc, claims); !reflect.DeepEqual(got, Audit{Pinned: []netip.Addr{netip.MustParseAddr("10.0.0.3")}}) {
		t.Errorf("audit %+v, want only 10.0.0.3 pinned: unrecognized IPAddresses neither collide nor leak nor lie outside, "+
			"and a clear bit of theirs is no recorded address missing", got)
	}
	one := netip.MustParseAddr("10.0.0.1")
	if got := claims.Recognized(one); len(got) != 1 || got[0].Holder != holder.ForEnactment("n1.p") {
		t.Errorf("recognized owners of 10.0.0.1: %+v, want n1.p alone", got)
	}
	if got, want := claims.Unrecognized(), []netip.Addr{one, netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"),
		netip.MustParseAddr("10.0.0.77")}; !reflect.DeepEqual(got, want) {
		t.Errorf("Unrecognized = %v, want %v", got, want)
	}
	o := claims[netip.MustParseAddr("10.0.0.2")][0]
	if !o.Unrecognized || o.String() != "IPAddress t/squat (not made by this provider for a claim)" ||
		o.Remedy("a") != "kubectl -n t delete ipaddress squat" || !o.Holder.Foreign() {
		t.Errorf("owner %+v reads %q, remedy %q", o, o.String(), o.Remedy("a"))
	}
}

package poolstatus

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
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

func TestClaimsOf(t *testing.T) {
	enactments := []nncev1beta1.NodeNetworkConfigurationEnactment{
		enactment("n2", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "junk"}}}, nil,
			"interfaces:\n- name: eth2\n  ipv4:\n    address:\n    - ip: 10.0.0.1\n"),
		enactment("n1", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "fd00::5"}}, "b": {Allocated: []string{"10.1.0.1"}}},
			map[string]string{"v4": "ip: 10.0.0.1\nprefix-length: 24\n", "v6": `{"ip":"fd00::5","prefix-length":64}`},
			"interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: 10.0.0.1\n  ipv6:\n    address:\n    - ip: fd00::5\n"),
	}
	got := ClaimsOf("a", enactments)
	want := Claims{
		netip.MustParseAddr("10.0.0.1"): {
			{Enactment: "n1.p", Node: "n1", Policy: "p", Capture: "v4", Interface: "eth1"},
			{Enactment: "n2.p", Node: "n2", Policy: "p", Interface: "eth2"},
		},
		netip.MustParseAddr("fd00::5"): {{Enactment: "n1.p", Node: "n1", Policy: "p", Capture: "v6", Interface: "eth1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("claims\n got %+v\nwant %+v", got, want)
	}
	if s := want[netip.MustParseAddr("10.0.0.1")][0].String(); s != "node n1 and interface eth1 (enactment n1.p)" {
		t.Errorf("owner reads %q", s)
	}
	if s := (Owner{Enactment: "x", Capture: "c"}).String(); s != "node ? and capture c (enactment x)" {
		t.Errorf("owner without node and interface reads %q", s)
	}
}

func TestAuditPool(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10", Exclude: []string{"10.0.0.5"}})
	alloc := ippool.NewAllocator(rng)
	for _, off := range []uint64{0, 1, 8} { // .1 .2 .9
		_ = alloc.Allocate(off)
	}
	claims := ClaimsOf("a", []nncev1beta1.NodeNetworkConfigurationEnactment{
		enactment("n1", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "10.0.0.3"}}}, nil, ""),
		enactment("n2", "p", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "10.0.0.5", "10.0.0.42"}}}, nil, ""),
	})
	got := AuditPool(alloc, claims)
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	want := Audit{Missing: addrs("10.0.0.3"), Unclaimed: []uint64{1, 8}, Outside: addrs("10.0.0.5", "10.0.0.42"), Collisions: addrs("10.0.0.1")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("audit\n got %+v\nwant %+v", got, want)
	}
	if got.Consistent() || !(Audit{}).Consistent() {
		t.Error("Consistent is wrong")
	}
	msg := CollisionMessage("a", claims, got.Collisions)
	if want := "The IP address 10.0.0.1 at node n1 (enactment n1.p) is colliding with node n2 (enactment n2.p); " +
		"reset all but one holder, e.g. kubectl annotate nnce n2.p nmstate.io/reset-ippool=a"; msg != want {
		t.Errorf("collision message\n got %s\nwant %s", msg, want)
	}
}

func TestExhaustedPool(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		pool string
		ok   bool
	}{
		{ExhaustedMessage("traffic-1", 10, 2), "traffic-1", true},
		{`NodeIPPool "x" not found: create it`, "", false},
		{"something else", "", false},
		{`NodeIPPool "unterminated is exhausted:`, "", false},
	} {
		if pool, ok := ExhaustedPool(tt.msg); pool != tt.pool || ok != tt.ok {
			t.Errorf("ExhaustedPool(%q) = %q, %v; want %q, %v", tt.msg, pool, ok, tt.pool, tt.ok)
		}
	}
}

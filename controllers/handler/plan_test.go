package handler

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// holding returns an enactment that records ips for captures a, b, ... of
// pool "p".
func holding(ips ...string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
	e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{}
	e.Status.IPPool = ippoolv1.EnactmentIPPools{}
	for i, ip := range ips {
		name := string(rune('a' + i))
		st := capture.Address{IP: netip.MustParseAddr(ip), PrefixLength: 24}.State()
		e.Status.CapturedStates[name] = shared.NodeNetworkConfigurationEnactmentCapturedState{State: shared.NewState(string(st))}
		a := e.Status.IPPool["p"]
		a.Allocated = append(a.Allocated, ip)
		e.Status.IPPool["p"] = a
	}
	return e
}

func TestPlanPool(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.5"})
	refs := []capture.Ref{{Capture: "a", Pool: "p"}, {Capture: "b", Pool: "p"}}
	tests := []struct {
		name      string
		e         *nncev1beta1.NodeNetworkConfigurationEnactment
		setBits   []uint64
		reused    map[string]string
		unsetBits []uint64
		fresh     []string
	}{
		{name: "nothing recorded", e: holding(), fresh: []string{"a", "b"}, reused: map[string]string{}},
		{name: "recorded and indexed", e: holding("10.0.0.3", "10.0.0.1"), setBits: []uint64{0, 2},
			reused: map[string]string{"a": "10.0.0.3", "b": "10.0.0.1"}},
		{name: "recorded, bit lost in a reset", e: holding("10.0.0.3"), setBits: nil,
			reused: map[string]string{"a": "10.0.0.3"}, unsetBits: []uint64{2}, fresh: []string{"b"}},
		{name: "recorded outside a re-created range", e: holding("10.0.0.9", "10.0.0.2"), setBits: []uint64{1},
			reused: map[string]string{"b": "10.0.0.2"}, fresh: []string{"a"}},
		{name: "the same address recorded twice", e: holding("10.0.0.2", "10.0.0.2"), setBits: []uint64{1},
			reused: map[string]string{"a": "10.0.0.2"}, fresh: []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alloc := ippool.NewAllocator(rng)
			for _, o := range tt.setBits {
				if err := alloc.Allocate(o); err != nil {
					t.Fatal(err)
				}
			}
			p := planPool(tt.e, &ippoolv1.NodeIPPool{}, alloc, refs)
			reused := map[string]string{}
			for name, a := range p.addresses {
				reused[name] = a.IP.String()
			}
			if !reflect.DeepEqual(reused, tt.reused) || !reflect.DeepEqual(p.unsetBits, tt.unsetBits) || !reflect.DeepEqual(p.fresh, tt.fresh) {
				t.Fatalf("plan reused=%v unset=%v fresh=%v; want %v %v %v", reused, p.unsetBits, p.fresh, tt.reused, tt.unsetBits, tt.fresh)
			}
			if err := p.apply(alloc, assign.Asker{Holder: holder.ForEnactment("n.p"), Node: "n", Policy: "p"}, "1", metav1.Now()); err != nil {
				t.Fatal(err)
			}
			seen := map[netip.Addr]bool{}
			for _, name := range []string{"a", "b"} {
				a := p.addresses[name]
				if seen[a.IP] || !alloc.HasIP(a.IP) || a.PrefixLength != 24 {
					t.Fatalf("after apply %s = %v (duplicate, unindexed or wrong prefix)", name, a)
				}
				seen[a.IP] = true
			}
		})
	}
}

func TestPlanPoolExhausted(t *testing.T) {
	alloc := ippool.NewAllocator(ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/30"}))
	p := planPool(holding(), &ippoolv1.NodeIPPool{}, alloc, []capture.Ref{{Capture: "a", Pool: "p"}, {Capture: "b", Pool: "p"}, {Capture: "c", Pool: "p"}})
	var ex *errExhausted
	if err := p.apply(alloc, assign.Asker{}, "1", metav1.Now()); !errors.As(err, &ex) || ex.size != 2 || ex.want != 1 {
		t.Fatalf("apply = %v, want exhausted of size 2 short by 1", err)
	}
}

// TestServedEnactmentIsNotReportedFull: a handler that asks the pool
// controller (no --self-allocate), whose cache has not shown yet the
// record of the address the controller served it, does not report the
// pool full when that address was the pool's last: it goes on asking. A
// status write saying IPPoolExhausted would change the enactment's
// resourceVersion, the served record would be refused, and the node
// would lose the address it was given. A pool filled by another holder's
// address in flight is full all the same.
func TestServedEnactmentIsNotReportedFull(t *testing.T) {
	full := func(entryHolder string) (*ippoolv1.NodeIPPool, *ippool.Allocator) {
		pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.1"}}}
		pool.Status.Conditions = []metav1.Condition{{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "ReconciledPool"}}
		pool.Status.InFlight = []ippoolv1.InFlightAddress{{IP: "10.0.0.1", Holder: entryHolder, Token: "5"}}
		alloc := ippool.NewAllocator(ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.1"}))
		if err := alloc.AllocateIP(netip.MustParseAddr("10.0.0.1")); err != nil {
			t.Fatal(err)
		}
		return pool, alloc
	}
	r := &Reconciler{NodeName: "n1", Recorder: events.NewFakeRecorder(10), Clock: clock.RealClock{}}
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "n1.policy", ResourceVersion: "5"}}
	who := assign.Asker{Holder: holder.ForEnactment(e.Name), Node: "n1", Policy: "policy"}
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "policy"}}
	refs := []capture.Ref{{Capture: "a", Pool: "p"}}

	pool, alloc := full(e.Name)
	plan, o := r.planWrite(context.Background(), policy, e, pool, alloc, refs, who)
	if o != nil || plan == nil || !reflect.DeepEqual(plan.fresh, []string{"a"}) {
		t.Fatalf("served its pool's last address, the record not seen yet: %+v, %+v; want it to go on asking", plan, o)
	}
	pool, alloc = full("n2.policy")
	if _, o := r.planWrite(context.Background(), policy, e, pool, alloc, refs, who); o == nil || string(o.reason) != ippoolv1.ReasonIPPoolExhausted {
		t.Fatalf("a pool filled by another enactment's address in flight: %+v; want IPPoolExhausted", o)
	}
}

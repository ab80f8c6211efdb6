package pool

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

func holding(name string, pools ippoolv1.EnactmentIPPools) nncev1beta1.NodeNetworkConfigurationEnactment {
	node, policy, _ := strings.Cut(name, ".")
	e := nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: policy}}}
	e.Status.IPPool = pools
	return e
}

func failingOn(name, pool string) nncev1beta1.NodeNetworkConfigurationEnactment {
	e := holding(name, nil)
	e.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationEnactmentConditionFailing,
		Status: corev1.ConditionTrue, Reason: ippoolv1.ReasonIPPoolExhausted, Message: poolstatus.ExhaustedMessage(pool, 2, 1)}}
	e.Status.WaitingForIPPool = pool
	return e
}

func TestAvailabilityOf(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.2"})
	full := ippool.NewAllocator(rng)
	_ = full.Allocate(0)
	_ = full.Allocate(1)
	for _, tt := range []struct {
		name       string
		enactments []nncev1beta1.NodeNetworkConfigurationEnactment
		want       availability
	}{
		{"up to date", []nncev1beta1.NodeNetworkConfigurationEnactment{
			holding("n1.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.1"}}}),
			holding("n2.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.2"}}}),
		}, reconciledPool},
		{"exhausted", []nncev1beta1.NodeNetworkConfigurationEnactment{
			holding("n1.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.1"}}}),
			holding("n2.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.2"}}}),
			failingOn("n3.pol", "p"),
			failingOn("n4.pol", "other"),
		}, refused(ippoolv1.ReasonExhaustedIPPool, "The IP pool has been depleted: 2 of 2 addresses are allocated and n3 (policy pol) "+
			"could not get one; grow spec.range in place within its CIDR (an earlier start, a later end, fewer excludes: "+
			"every holder keeps its address), or free addresses; if the range already fills its CIDR, create a pool over a larger CIDR "+
			"and point the policies at it")},
		{"collision wins over exhaustion", []nncev1beta1.NodeNetworkConfigurationEnactment{
			holding("n1.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.1"}}}),
			holding("n2.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.1"}}}),
			failingOn("n3.pol", "p"),
		}, refused(ippoolv1.ReasonIPCollision, "The IP address 10.0.0.1 at node n1 (enactment n1.pol) is colliding with "+
			"node n2 (enactment n2.pol); reset all but one holder, e.g. kubectl annotate nnce n2.pol nmstate.io/reset-ippool=p")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
			if got := availabilityOf(pool, full, viewOf("p", full, holdings{tt.enactments, holder.OfEnactments(tt.enactments)})); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestSetConditions: the transition time moves only when the status
// flips, a repeated value writes nothing, and only a new status or reason
// counts as a transition (an Event).
func TestSetConditions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	step := func(a availability, at time.Time, wantChanged, wantTransition bool, wantLTT time.Time) {
		t.Helper()
		changed, transitioned := conditionSet{ippoolv1.ConditionAvailable: a}.set(p, at)
		c := meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionAvailable)
		if changed != wantChanged || (len(transitioned) > 0) != wantTransition || !c.LastTransitionTime.Time.Equal(wantLTT) {
			t.Errorf("%+v at %s: changed %v transitioned %v LTT %s; want %v %v %s", a, at, changed, transitioned,
				c.LastTransitionTime.Time, wantChanged, wantTransition, wantLTT)
		}
		if p.Status.ObservedGeneration != p.Generation || c.ObservedGeneration != p.Generation {
			t.Errorf("observed generation %d/%d, want %d", p.Status.ObservedGeneration, c.ObservedGeneration, p.Generation)
		}
	}
	step(reconciling, t0, true, true, t0)
	step(reconciling, t0.Add(time.Minute), false, false, t0)
	step(reconciledPool, t0.Add(2*time.Minute), true, true, t0.Add(2*time.Minute))
	exhaustedA := refused(ippoolv1.ReasonExhaustedIPPool, "a")
	step(exhaustedA, t0.Add(3*time.Minute), true, true, t0.Add(3*time.Minute))
	step(refused(ippoolv1.ReasonExhaustedIPPool, "b"), t0.Add(4*time.Minute), true, false, t0.Add(3*time.Minute))
	step(refused(ippoolv1.ReasonIPCollision, "b"), t0.Add(5*time.Minute), true, true, t0.Add(3*time.Minute))
	p.Generation = 2
	step(refused(ippoolv1.ReasonIPCollision, "b"), t0.Add(6*time.Minute), true, false, t0.Add(3*time.Minute))
}

func TestSightings(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := 2 * time.Minute
	var u sightings[uint64]
	for _, tt := range []struct {
		at        time.Duration
		unclaimed []uint64
		due       []uint64
		next      time.Duration
	}{
		{0, []uint64{5, 7}, nil, grace},
		{time.Minute, []uint64{5, 7, 9}, nil, time.Minute},
		// 7 was claimed meanwhile: its clock is forgotten.
		{90 * time.Second, []uint64{5, 9}, nil, 30 * time.Second},
		{2 * time.Minute, []uint64{5, 9, 7}, []uint64{5}, time.Minute},
		{3 * time.Minute, []uint64{5, 9, 7}, []uint64{5, 9}, time.Minute},
		{4 * time.Minute, nil, nil, 0},
	} {
		due, next := dueOffsets(u.see(tt.unclaimed, t0.Add(tt.at)), grace)
		if !reflect.DeepEqual(due, tt.due) || next != tt.next {
			t.Errorf("at %s with %v unclaimed: due %v next %s, want %v %s", tt.at, tt.unclaimed, due, next, tt.due, tt.next)
		}
	}
}

// TestCollectUnclaimed: collection frees only due bits that are set, that
// nobody claims on the API server now, and that no node's network
// carries; one a node carries is quarantined for that node instead.
func TestCollectUnclaimed(t *testing.T) {
	alloc := ippool.NewAllocator(ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10"}))
	for _, off := range []uint64{0, 1, 2, 3, 4, 6} {
		_ = alloc.Allocate(off)
	}
	owners := poolstatus.OwnersOf("p", alloc.Range(), holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{
		holding("n1.pol", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.2"}}})}))
	pool := &ippoolv1.NodeIPPool{}
	poolstatus.AddInFlight(pool, ippoolv1.InFlightAddress{IP: "10.0.0.4", Holder: "n2.pol", Token: "7"})
	poolstatus.AddQuarantine(pool, ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Node: "n3"})
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	carried := map[netip.Addr]string{netip.MustParseAddr("10.0.0.7"): "n9"}
	got := collectUnclaimed(pool, alloc, owners, []uint64{0, 1, 3, 4, 5, 6}, carried, now)
	if want := []uint64{0}; !reflect.DeepEqual(got.freed, want) {
		t.Errorf("freed %v, want %v (1 is claimed, 3 in flight, 4 quarantined, 5 is not set, 6 carried)", got.freed, want)
	}
	if want := []string{"10.0.0.7 on node n9"}; !reflect.DeepEqual(got.quarantined, want) {
		t.Errorf("quarantined %v, want %v", got.quarantined, want)
	}
	if q := poolstatus.QuarantineOf(pool, "10.0.0.7"); q == nil || q.Node != "n9" || !q.Since.Equal(&now) {
		t.Errorf("quarantine of 10.0.0.7: %+v", q)
	}
	if alloc.Has(0) || !alloc.Has(1) || !alloc.Has(2) || !alloc.Has(3) || !alloc.Has(4) || !alloc.Has(6) {
		t.Errorf("bits after collection: 0=%v 1=%v 2=%v 3=%v 4=%v 6=%v", alloc.Has(0), alloc.Has(1), alloc.Has(2), alloc.Has(3),
			alloc.Has(4), alloc.Has(6))
	}
}

func TestPoolsOfEnactment(t *testing.T) {
	e := failingOn("n1.pol", "full")
	e.Status.IPPool = ippoolv1.EnactmentIPPools{"b": {Allocated: []string{"10.0.0.1"}}, "a": {Allocated: []string{"10.0.1.1"}}}
	e.Annotations = map[string]string{ippoolv1.ResetIPPoolAnnotation: "a"}
	if got, want := poolsOfEnactment(&e), []string{"a", "b", "full"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pools %v, want %v", got, want)
	}
	if got := poolsOfEnactment(&ippoolv1.NodeIPPool{}); got != nil {
		t.Errorf("a pool is not an enactment, got %v", got)
	}
}

func TestOlderOverlapping(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	mk := func(name string, created metav1.Time, start, end string) ippoolv1.NodeIPPool {
		return ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), CreationTimestamp: created},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24", Start: start, End: end}}}
	}
	pools := []ippoolv1.NodeIPPool{mk("first", t0, "10.0.0.1", "10.0.0.10"), mk("second", t1, "10.0.0.10", "10.0.0.20"),
		mk("apart", t0, "10.0.0.30", "10.0.0.40"), mk("a-twin", t1, "10.0.0.35", "10.0.0.36")}
	for _, tt := range []struct{ pool, want string }{{"first", ""}, {"second", "first"}, {"apart", ""}, {"a-twin", "apart"}} {
		for i := range pools {
			if pools[i].Name != tt.pool {
				continue
			}
			rng, err := poolstatus.Range(&pools[i])
			if err != nil {
				t.Fatal(err)
			}
			if got := olderOverlapping(&pools[i], rng, pools); got != tt.want {
				t.Errorf("%s overlaps older %q, want %q", tt.pool, got, tt.want)
			}
		}
	}
}

func TestReservationsOf(t *testing.T) {
	spec := ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.9.0.0/24", End: "10.9.0.20"}}
	rack := &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}
	labels := map[string]map[string]string{"n1": {"rack": "a"}, "n2": {"rack": "b"}}
	tests := []struct {
		name         string
		reservations []ippoolv1.Reservation
		enactments   []nncev1beta1.NodeNetworkConfigurationEnactment
		carriers     map[netip.Addr][]string
		want         string
	}{
		{"held by its node", []ippoolv1.Reservation{{IP: "10.9.0.5", Node: "n1"}},
			[]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1.p", ippoolv1.EnactmentIPPools{"pool": {Allocated: []string{"10.9.0.5"}}})},
			nil, "True ReservationsHonored"},
		{"held by the node its selector matches", []ippoolv1.Reservation{{IP: "10.9.0.5", NodeSelector: rack}},
			[]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1.p", ippoolv1.EnactmentIPPools{"pool": {Allocated: []string{"10.9.0.5"}}})},
			nil, "True ReservationsHonored"},
		{"held by a node its selector does not match", []ippoolv1.Reservation{{IP: "10.9.0.5", NodeSelector: rack}},
			[]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n2.p", ippoolv1.EnactmentIPPools{"pool": {Allocated: []string{"10.9.0.5"}}})},
			nil, "False ReservationConflict: 10.9.0.5 is reserved for the node matching rack=a but held by node n2 (enactment n2.p)"},
		{"held under another policy", []ippoolv1.Reservation{{IP: "10.9.0.5", Node: "n1", Policy: "q"}},
			[]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1.p", ippoolv1.EnactmentIPPools{"pool": {Allocated: []string{"10.9.0.5"}}})},
			nil, "False ReservationConflict: 10.9.0.5 is reserved for node n1 (policy q) but held by node n1 (enactment n1.p)"},
		{"outside the range", []ippoolv1.Reservation{{IP: "10.9.0.5", Node: "n1"}, {IP: "10.9.0.30", Node: "n2"}}, nil, nil,
			"False ReservationInvalid: These reservations can never be handed out and are ignored: 10.9.0.30 (it is outside the range 10.9.0.1-10.9.0.20)"},
		{"free and carried by another node", []ippoolv1.Reservation{{IP: "10.9.0.5", Node: "n1"}}, nil,
			map[netip.Addr][]string{netip.MustParseAddr("10.9.0.5"): {"n2"}},
			"False ReservationConflict: 10.9.0.5 is reserved for node n1 but node n2's network carries it and no holder records it, so no one is given it; take it off node n2"},
		{"free and carried by a node its selector does not match", []ippoolv1.Reservation{{IP: "10.9.0.5", NodeSelector: rack}}, nil,
			map[netip.Addr][]string{netip.MustParseAddr("10.9.0.5"): {"n2"}},
			"False ReservationConflict: 10.9.0.5 is reserved for the node matching rack=a but node n2's network carries it"},
		{"held for another node that carries it", []ippoolv1.Reservation{{IP: "10.9.0.7", Node: "n1"}}, nil, nil,
			"False ReservationConflict: 10.9.0.7 is reserved for node n1 but node n2's network carries it and no holder records it"},
		{"free and carried by its node", []ippoolv1.Reservation{{IP: "10.9.0.5", Node: "n1"}, {IP: "10.9.0.6", NodeSelector: rack}}, nil,
			map[netip.Addr][]string{netip.MustParseAddr("10.9.0.5"): {"n1"}, netip.MustParseAddr("10.9.0.6"): {"n1"}},
			"True ReservationsHonored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: spec}
			p.Spec.Reservations = tt.reservations
			rng, err := poolstatus.Range(p)
			if err != nil {
				t.Fatal(err)
			}
			alloc := ippool.NewAllocator(rng)
			owners := poolstatus.Holders("pool", rng, holder.OfEnactments(tt.enactments))
			for ip := range owners {
				_ = alloc.AllocateIP(ip)
			}
			// 10.9.0.7 is held for n2, found carrying it (no holder).
			_ = alloc.AllocateIP(netip.MustParseAddr("10.9.0.7"))
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.9.0.7", Node: "n2"})
			a := reservationsOf(p, alloc, owners, func(n string) map[string]string { return labels[n] }, tt.carriers)
			if got := string(a.status) + " " + a.reason + ": " + a.message; !strings.HasPrefix(got, tt.want) {
				t.Fatalf("got  %q\nwant %q...", got, tt.want)
			}
		})
	}
}

// TestNoLongerWaiting: the pool an enactment stops waiting on hears of it
// (its condition and its waiting holders' metric change); an update that
// keeps the wait, or never had one, maps to nothing more.
func TestNoLongerWaiting(t *testing.T) {
	waiting, got := failingOn("n1.p", "a"), holding("n1.p", nil)
	elsewhere := failingOn("n1.p", "b")
	for _, c := range []struct {
		name     string
		old, new nncev1beta1.NodeNetworkConfigurationEnactment
		want     []string
	}{
		{"stopped waiting", waiting, got, []string{"a"}},
		{"waits on another pool", waiting, elsewhere, []string{"a"}},
		{"still waits", waiting, waiting, nil},
		{"never waited", got, waiting, nil},
	} {
		var names []string
		for _, req := range noLongerWaiting(t.Context(), &c.old, &c.new) {
			names = append(names, req.Name)
		}
		if !reflect.DeepEqual(names, c.want) {
			t.Errorf("%s: %v, want %v", c.name, names, c.want)
		}
	}
}

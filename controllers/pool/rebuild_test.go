package pool

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

func enactmentHolding(name string, pools ippoolv1.EnactmentIPPools) nncev1beta1.NodeNetworkConfigurationEnactment {
	e := nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name}}
	e.Status.IPPool = pools
	return e
}

func TestRebuild(t *testing.T) {
	rng := ippool.MustNewRange(ippool.Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10", Exclude: []string{"10.0.0.5"}})
	alloc := ippool.NewAllocator(rng)
	_ = alloc.Allocate(8) // 10.0.0.9: unclaimed, must survive
	_ = alloc.Allocate(0) // 10.0.0.1: claimed and already set
	enactments := []nncev1beta1.NodeNetworkConfigurationEnactment{
		enactmentHolding("a.p", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.1", "10.0.0.3"}}, "other": {Allocated: []string{"10.0.0.4"}}}),
		enactmentHolding("b.p", ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.3", "10.0.0.42", "10.0.0.5", "junk"}}}),
	}
	res := rebuild(alloc, claimsOf("p", enactments))
	if res.set != 1 {
		t.Errorf("set %d bits, want 1 (10.0.0.3)", res.set)
	}
	if want := []string{"10.0.0.3 is held by a.p and b.p"}; !reflect.DeepEqual(res.collisions, want) {
		t.Errorf("collisions %v, want %v", res.collisions, want)
	}
	if want := []string{"10.0.0.5 by b.p", "10.0.0.42 by b.p"}; !reflect.DeepEqual(res.outside, want) {
		t.Errorf("outside %v, want %v", res.outside, want)
	}
	var got []uint64
	for o := range alloc.Offsets() {
		got = append(got, o)
	}
	if want := []uint64{0, 2, 8}; !reflect.DeepEqual(got, want) {
		t.Errorf("bits %v, want %v (claimed ones set, the unclaimed one kept)", got, want)
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

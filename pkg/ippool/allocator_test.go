package ippool

import (
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// checkInvariant asserts the Allocator's documented invariant.
func checkInvariant(t testing.TB, a *Allocator) {
	t.Helper()
	var count uint64
	for i, run := range a.runs {
		if run.hi < run.lo || run.hi > a.r.last {
			t.Fatalf("run %d %v is malformed or past %d", i, run, a.r.last)
		}
		if i > 0 && a.runs[i-1].hi+1 >= run.lo {
			t.Fatalf("runs %d %v and %d %v touch or overlap", i-1, a.runs[i-1], i, run)
		}
		if o, ok := a.r.firstExcludedIn(run); ok {
			t.Fatalf("run %v holds excluded offset %d", run, o)
		}
		count += run.hi - run.lo + 1
	}
	if count != a.count {
		t.Fatalf("count %d, runs hold %d", a.count, count)
	}
}

func TestAllocateNextSeedPool(t *testing.T) {
	r := MustNewRange(Spec{CIDR: "10.10.11.0/24", Start: "10.10.11.4", End: "10.10.11.10", Exclude: []string{"10.10.11.5", "10.10.11.7"}})
	a := NewAllocator(r)
	var got []uint64
	for {
		o, err := a.AllocateNext()
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o)
		checkInvariant(t, a)
	}
	if want := []uint64{0, 2, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	if a.Count() != r.Size() || a.Free() != 0 {
		t.Fatalf("count %d free %d size %d", a.Count(), a.Free(), r.Size())
	}
	// Releasing hands the lowest free offset out again.
	if err := a.Release(4); err != nil {
		t.Fatal(err)
	}
	if o, err := a.AllocateNext(); err != nil || o != 4 {
		t.Fatalf("AllocateNext = %d, %v; want 4", o, err)
	}
}

func TestAllocateNextSkipsEdges(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want []string
	}{
		{"exclude at start", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.6", Exclude: []string{"10.0.0.0/30"}},
			[]string{"10.0.0.4", "10.0.0.5", "10.0.0.6"}},
		{"exclude at end", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.6", Exclude: []string{"10.0.0.4/30"}},
			[]string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{"/31", Spec{CIDR: "10.0.0.0/31"}, []string{"10.0.0.0", "10.0.0.1"}},
		{"/32", Spec{CIDR: "10.0.0.9/32"}, []string{"10.0.0.9"}},
		{"/30 network and broadcast", Spec{CIDR: "10.0.0.0/30", Start: "10.0.0.0", End: "10.0.0.3"}, []string{"10.0.0.1", "10.0.0.2"}},
		{"/127", Spec{CIDR: "2001:db8::/127"}, []string{"2001:db8::", "2001:db8::1"}},
		{"/128", Spec{CIDR: "2001:db8::9/128"}, []string{"2001:db8::9"}},
		{"ipv6 anycast", Spec{CIDR: "2001:db8::/126", Start: "2001:db8::"}, []string{"2001:db8::1", "2001:db8::2", "2001:db8::3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(MustNewRange(tt.spec))
			var got []string
			for {
				o, err := a.AllocateNext()
				if errors.Is(err, ErrFull) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				ip, _ := a.Range().IP(o)
				got = append(got, ip.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("allocated %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAllocateErrors(t *testing.T) {
	a := NewAllocator(MustNewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10", Exclude: []string{"10.0.0.5"}}))
	if err := a.Allocate(2); err != nil {
		t.Fatal(err)
	}
	before := a.Clone()
	for _, tc := range []struct {
		offset uint64
		want   error
	}{{2, ErrAllocated}, {4, ErrExcluded}, {10, ErrNotInRange}, {math.MaxUint64, ErrNotInRange}} {
		if err := a.Allocate(tc.offset); !errors.Is(err, tc.want) {
			t.Errorf("Allocate(%d) = %v, want %v", tc.offset, err, tc.want)
		}
	}
	if err := a.AllocateIP(netip.MustParseAddr("10.0.0.11")); !errors.Is(err, ErrNotInRange) {
		t.Errorf("AllocateIP outside = %v", err)
	}
	if err := a.Release(10); !errors.Is(err, ErrNotInRange) {
		t.Errorf("Release(10) = %v", err)
	}
	// Releasing a free or excluded offset is a no-op.
	if err := a.Release(3); err != nil {
		t.Errorf("Release(free) = %v", err)
	}
	if err := a.Release(4); err != nil {
		t.Errorf("Release(excluded) = %v", err)
	}
	if !a.Equal(before) {
		t.Fatal("a failed call changed the allocator")
	}
	if !a.HasIP(netip.MustParseAddr("10.0.0.3")) || a.HasIP(netip.MustParseAddr("10.0.0.4")) {
		t.Fatal("HasIP")
	}
}

// TestAllocatorMatchesModel drives random operations against a map and
// checks the invariant and the contents after every step.
func TestAllocatorMatchesModel(t *testing.T) {
	specs := []Spec{
		{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.16/28", "10.0.0.77", "10.0.0.200/29"}},
		{CIDR: "2001:db8::/120", Start: "2001:db8::", Exclude: []string{"2001:db8::80/125"}},
		{CIDR: "10.0.0.0/30"},
	}
	for _, spec := range specs {
		t.Run(spec.CIDR, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			r := MustNewRange(spec)
			a := NewAllocator(r)
			model := map[uint64]bool{}
			for step := range 20000 {
				o := rng.Uint64N(r.Last() + 2) // sometimes past the end
				switch rng.IntN(4) {
				case 0:
					err := a.Allocate(o)
					wantOK := o <= r.Last() && !r.Excluded(o) && !model[o]
					if (err == nil) != wantOK {
						t.Fatalf("step %d Allocate(%d) = %v, want ok=%v", step, o, err, wantOK)
					}
					if err == nil {
						model[o] = true
					}
				case 1:
					o, err := a.AllocateNext()
					want, ok := lowestFree(r, model)
					if !ok {
						if !errors.Is(err, ErrFull) {
							t.Fatalf("step %d AllocateNext = %d, %v; want ErrFull", step, o, err)
						}
						break
					}
					if err != nil || o != want {
						t.Fatalf("step %d AllocateNext = %d, %v; want %d", step, o, err, want)
					}
					model[o] = true
				default:
					if err := a.Release(o); (err == nil) != (o <= r.Last()) {
						t.Fatalf("step %d Release(%d) = %v", step, o, err)
					}
					delete(model, o)
				}
				checkInvariant(t, a)
				if a.Count() != uint64(len(model)) {
					t.Fatalf("step %d count %d, model %d", step, a.Count(), len(model))
				}
			}
			for o := range a.Offsets() {
				if !model[o] {
					t.Fatalf("offset %d allocated, not in model", o)
				}
			}
		})
	}
}

func lowestFree(r *Range, model map[uint64]bool) (uint64, bool) {
	for o := uint64(0); o <= r.Last(); o++ {
		if !r.Excluded(o) && !model[o] {
			return o, true
		}
	}
	return 0, false
}

func TestAllocatorHugeOffsets(t *testing.T) {
	r := MustNewRange(Spec{CIDR: "2001:db8::/48", Start: "2001:db8:0:1::", End: "2001:db8:0:1:ffff:ffff:ffff:ffff"})
	a := NewAllocator(r)
	for _, o := range []uint64{math.MaxUint64, math.MaxUint64 - 1, 0, 1 << 63} {
		if err := a.Allocate(o); err != nil {
			t.Fatal(err)
		}
		checkInvariant(t, a)
	}
	if err := a.Release(math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	checkInvariant(t, a)
	b := NewAllocator(r)
	if err := b.Restore(a.Snapshot()); err != nil || !a.Equal(b) {
		t.Fatalf("restore: %v", err)
	}
}

func TestAllocatorFullRangeReportsFull(t *testing.T) {
	a := NewAllocator(MustNewRange(Spec{CIDR: "10.0.0.0/16"}))
	for range 65534 {
		if _, err := a.AllocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.AllocateNext(); !errors.Is(err, ErrFull) {
		t.Fatalf("want ErrFull, got %v", err)
	}
	if len(a.runs) != 1 {
		t.Fatalf("%d runs, want 1", len(a.runs))
	}
}

// TestAllocateRun: a run allocated at once equals the same offsets
// allocated one by one, whatever was set before, and a run over an excluded
// offset or past the range changes nothing.
func TestAllocateRun(t *testing.T) {
	r := MustNewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.40", Exclude: []string{"10.0.0.30"}})
	rnd := rand.New(rand.NewPCG(7, 9))
	for i := range 500 {
		run, each := NewAllocator(r), NewAllocator(r)
		for range rnd.IntN(8) {
			off := rnd.Uint64N(r.Last() + 1)
			_ = run.Allocate(off)
			_ = each.Allocate(off)
		}
		first := rnd.Uint64N(r.Last() + 1)
		last := first + rnd.Uint64N(r.Last()+1-first)
		before := run.Clone()
		err := run.AllocateRun(first, last)
		for off := first; off <= last; off++ {
			if e := each.Allocate(off); e != nil && !errors.Is(e, ErrAllocated) {
				each = nil
				break
			}
		}
		switch {
		case each == nil && err == nil:
			t.Fatalf("case %d: run %d-%d over an excluded offset allocated", i, first, last)
		case each == nil:
			if !errors.Is(err, ErrExcluded) || !run.Equal(before) {
				t.Fatalf("case %d: run %d-%d: %v, and the allocator changed", i, first, last, err)
			}
		case err != nil || !run.Equal(each) || run.Count() != each.Count():
			t.Fatalf("case %d: run %d-%d: %v; got %d allocated, want %d", i, first, last, err, run.Count(), each.Count())
		}
	}
	if err := NewAllocator(r).AllocateRun(5, r.Last()+1); !errors.Is(err, ErrNotInRange) {
		t.Errorf("a run past the range: %v", err)
	}
}

package ippool

import (
	"fmt"
	"iter"
	"math"
	"net/netip"
	"slices"
	"sort"
)

// Allocator is the set of allocated offsets of one Range: the bitmap of a
// NodeIPPool's status, kept as runs of consecutive offsets so that memory and
// snapshots grow with the number of runs, not with the size of the range.
//
// Invariant: runs are sorted, disjoint and non-adjacent, lie within
// [0, Range.Last()], contain no excluded offset, and count is the sum of
// their lengths.
//
// An Allocator is not safe for concurrent use.
type Allocator struct {
	r     *Range
	runs  []span
	count uint64
}

// NewAllocator returns an empty allocator over r.
func NewAllocator(r *Range) *Allocator {
	return &Allocator{r: r}
}

// Range returns the range the allocator hands out.
func (a *Allocator) Range() *Range { return a.r }

// Count returns the number of allocated offsets.
func (a *Allocator) Count() uint64 { return a.count }

// Free returns the number of assignable offsets not allocated.
func (a *Allocator) Free() uint64 { return a.r.size - a.count }

// Has reports whether offset is allocated.
func (a *Allocator) Has(offset uint64) bool {
	i := a.search(offset)
	return i < len(a.runs) && a.runs[i].lo <= offset
}

// search returns the index of the first run ending at or after offset.
func (a *Allocator) search(offset uint64) int {
	return sort.Search(len(a.runs), func(i int) bool { return a.runs[i].hi >= offset })
}

// Allocate marks offset allocated. It fails with ErrNotInRange past the
// range, ErrExcluded for an excluded or reserved offset, and ErrAllocated if
// offset is already allocated; on error nothing changes.
func (a *Allocator) Allocate(offset uint64) error {
	if offset > a.r.last {
		_, err := a.r.IP(offset)
		return err
	}
	if a.r.Excluded(offset) {
		return fmt.Errorf("%w: offset %d (%s)", ErrExcluded, offset, a.ip(offset))
	}
	i := a.search(offset)
	if i < len(a.runs) && a.runs[i].lo <= offset {
		return fmt.Errorf("%w: offset %d (%s)", ErrAllocated, offset, a.ip(offset))
	}
	a.insert(i, offset)
	return nil
}

// AllocateRun marks every offset from first to last allocated, whether or
// not some already are. It fails with ErrNotInRange past the range or when
// first > last, and with ErrExcluded if the run holds an excluded or
// reserved offset; on error nothing changes. Its cost grows with the runs
// it touches, not with the offsets it spans.
func (a *Allocator) AllocateRun(first, last uint64) error {
	if first > last || last > a.r.last {
		return fmt.Errorf("%w: offsets %d-%d of a range whose last offset is %d", ErrNotInRange, first, last, a.r.last)
	}
	if off, ok := a.r.firstExcludedIn(span{first, last}); ok {
		return fmt.Errorf("%w: offset %d (%s)", ErrExcluded, off, a.ip(off))
	}
	merged := span{first, last}
	lo := a.search(first)
	if lo > 0 && a.runs[lo-1].hi+1 == first {
		lo--
	}
	hi := lo
	for hi < len(a.runs) && (last == a.r.last || a.runs[hi].lo <= last+1) {
		merged.lo, merged.hi = min(merged.lo, a.runs[hi].lo), max(merged.hi, a.runs[hi].hi)
		a.count -= a.runs[hi].len()
		hi++
	}
	a.runs = slices.Replace(a.runs, lo, hi, merged)
	a.count += merged.len()
	return nil
}

// insert adds offset, which is free and not excluded, before run i.
func (a *Allocator) insert(i int, offset uint64) {
	joinsLeft := i > 0 && a.runs[i-1].hi+1 == offset
	joinsRight := i < len(a.runs) && offset < math.MaxUint64 && a.runs[i].lo == offset+1
	switch {
	case joinsLeft && joinsRight:
		a.runs[i-1].hi = a.runs[i].hi
		a.runs = slices.Delete(a.runs, i, i+1)
	case joinsLeft:
		a.runs[i-1].hi = offset
	case joinsRight:
		a.runs[i].lo = offset
	default:
		a.runs = slices.Insert(a.runs, i, span{lo: offset, hi: offset})
	}
	a.count++
}

// AllocateNext allocates and returns the lowest free assignable offset, or
// fails with ErrFull.
func (a *Allocator) AllocateNext() (uint64, error) {
	var candidate uint64
	for i := 0; ; {
		next, ok := a.r.nextAssignable(candidate)
		if !ok {
			return 0, fmt.Errorf("%w: all %d addresses of %s-%s are allocated", ErrFull, a.r.size, a.r.start, a.r.end)
		}
		candidate = next
		// Runs are sorted, so the scan resumes where the last one stopped.
		for i < len(a.runs) && a.runs[i].hi < candidate {
			i++
		}
		if i == len(a.runs) || a.runs[i].lo > candidate {
			a.insert(i, candidate)
			return candidate, nil
		}
		if a.runs[i].hi >= a.r.last {
			return 0, fmt.Errorf("%w: all %d addresses of %s-%s are allocated", ErrFull, a.r.size, a.r.start, a.r.end)
		}
		candidate = a.runs[i].hi + 1
	}
}

// Release frees offset. Releasing a free or excluded offset is a no-op, so
// Release is idempotent; an offset past the range fails with ErrNotInRange.
func (a *Allocator) Release(offset uint64) error {
	if offset > a.r.last {
		_, err := a.r.IP(offset)
		return err
	}
	i := a.search(offset)
	if i == len(a.runs) || a.runs[i].lo > offset {
		return nil
	}
	run := a.runs[i]
	switch {
	case run.lo == offset && run.hi == offset:
		a.runs = slices.Delete(a.runs, i, i+1)
	case run.lo == offset:
		a.runs[i].lo++
	case run.hi == offset:
		a.runs[i].hi--
	default:
		a.runs[i].hi = offset - 1
		a.runs = slices.Insert(a.runs, i+1, span{lo: offset + 1, hi: run.hi})
	}
	a.count--
	return nil
}

// AllocateIP allocates ip; errors are those of Range.Offset and Allocate.
func (a *Allocator) AllocateIP(ip netip.Addr) error {
	o, err := a.r.Offset(ip)
	if err != nil {
		return err
	}
	return a.Allocate(o)
}

// ReleaseIP releases ip; errors are those of Range.Offset and Release.
func (a *Allocator) ReleaseIP(ip netip.Addr) error {
	o, err := a.r.Offset(ip)
	if err != nil {
		return err
	}
	return a.Release(o)
}

// HasIP reports whether ip is inside the range and allocated.
func (a *Allocator) HasIP(ip netip.Addr) bool {
	o, err := a.r.Offset(ip)
	return err == nil && a.Has(o)
}

// Offsets yields every allocated offset in increasing order.
func (a *Allocator) Offsets() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for _, run := range a.runs {
			for o := run.lo; ; o++ {
				if !yield(o) {
					return
				}
				if o == run.hi {
					break
				}
			}
		}
	}
}

// Runs yields every maximal run of allocated offsets as (first, last),
// inclusive, in increasing order.
func (a *Allocator) Runs() iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		for _, run := range a.runs {
			if !yield(run.lo, run.hi) {
				return
			}
		}
	}
}

// Clear releases every offset.
func (a *Allocator) Clear() {
	a.runs, a.count = nil, 0
}

// Clone returns an independent copy.
func (a *Allocator) Clone() *Allocator {
	return &Allocator{r: a.r, runs: slices.Clone(a.runs), count: a.count}
}

// Equal reports whether both allocators hold the same offsets.
func (a *Allocator) Equal(b *Allocator) bool {
	return a.count == b.count && slices.Equal(a.runs, b.runs)
}

func (a *Allocator) ip(offset uint64) netip.Addr {
	ip, _ := a.r.IP(offset)
	return ip
}

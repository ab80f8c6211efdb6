package ippool

import (
	"encoding/base64"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// plainBitmap is the baseline the benchmarks compare against: one bit per
// offset, a linear scan for the first free one, and the raw words as the
// snapshot, as a straightforward pool status would store them.
type plainBitmap struct {
	words    []uint64
	excluded []uint64
}

func newPlainBitmap(r *Range) *plainBitmap {
	n := r.Last()/64 + 1
	b := &plainBitmap{words: make([]uint64, n), excluded: make([]uint64, n)}
	for _, s := range r.excluded {
		for o := s.lo; o <= s.hi; o++ {
			b.excluded[o/64] |= 1 << (o % 64)
		}
	}
	return b
}

func (b *plainBitmap) set(o uint64)   { b.words[o/64] |= 1 << (o % 64) }
func (b *plainBitmap) clear(o uint64) { b.words[o/64] &^= 1 << (o % 64) }

func (b *plainBitmap) allocateNext(last uint64) (uint64, bool) {
	for i, w := range b.words {
		if taken := w | b.excluded[i]; taken != ^uint64(0) {
			o := uint64(i)*64 + uint64(bits.TrailingZeros64(^taken))
			if o > last {
				return 0, false
			}
			b.set(o)
			return o, true
		}
	}
	return 0, false
}

func (b *plainBitmap) snapshot() string {
	raw := make([]byte, 0, len(b.words)*8)
	for _, w := range b.words {
		raw = binary.LittleEndian.AppendUint64(raw, w)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// slash16With65000 returns a /16 with 65,000 of its 65,534 addresses
// allocated: the lowest ones (contiguous), or all but 534 random ones
// (fragmented).
func slash16With65000(b *testing.B, fragmented bool) (*Allocator, *plainBitmap) {
	r := MustNewRange(slash16)
	a, p := NewAllocator(r), newPlainBitmap(r)
	for range 65000 {
		o, _ := a.AllocateNext()
		p.set(o)
	}
	if fragmented {
		// Take the rest, then free 534 random addresses: the same count, with
		// free holes scattered through the pool and hundreds of runs.
		for a.Free() > 0 {
			o, _ := a.AllocateNext()
			p.set(o)
		}
		rng := rand.New(rand.NewPCG(16, 16))
		for a.Count() > 65000 {
			o := rng.Uint64N(a.Range().Last() + 1)
			_ = a.Release(o)
			p.clear(o)
		}
	}
	return a, p
}

func BenchmarkAllocateNext(b *testing.B) {
	for _, layout := range []struct {
		name       string
		fragmented bool
	}{{"contiguous", false}, {"fragmented", true}} {
		b.Run("/16-65000-allocated/"+layout.name+"/runs", func(b *testing.B) {
			a, _ := slash16With65000(b, layout.fragmented)
			b.ResetTimer()
			for b.Loop() {
				o, err := a.AllocateNext()
				if err != nil {
					b.Fatal(err)
				}
				_ = a.Release(o)
			}
		})
		b.Run("/16-65000-allocated/"+layout.name+"/baseline-plain-bitmap", func(b *testing.B) {
			a, p := slash16With65000(b, layout.fragmented)
			b.ResetTimer()
			for b.Loop() {
				o, ok := p.allocateNext(a.Range().Last())
				if !ok {
					b.Fatal("full")
				}
				p.clear(o)
			}
		})
	}
}

func BenchmarkSnapshot(b *testing.B) {
	for _, c := range snapshotCases(b) {
		b.Run(c.name+"/runs", func(b *testing.B) {
			var s string
			for b.Loop() {
				s = c.alloc.Snapshot()
			}
			b.ReportMetric(float64(len(s)), "bytes")
		})
		if c.plain != nil {
			b.Run(c.name+"/baseline-plain-bitmap", func(b *testing.B) {
				var s string
				for b.Loop() {
					s = c.plain.snapshot()
				}
				b.ReportMetric(float64(len(s)), "bytes")
			})
		}
	}
}

func BenchmarkRestore(b *testing.B) {
	for _, c := range snapshotCases(b) {
		b.Run(c.name, func(b *testing.B) {
			s := c.alloc.Snapshot()
			a := NewAllocator(c.alloc.Range())
			for b.Loop() {
				if err := a.Restore(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type snapshotCase struct {
	name  string
	alloc *Allocator
	plain *plainBitmap // nil where a plain bitmap cannot exist (/64)
}

func snapshotCases(b *testing.B) []snapshotCase {
	full := fullSlash16(b)
	s8 := scattered(b, MustNewRange(slash8), 10000, 1000, 8)
	s64 := scattered(b, MustNewRange(slash64), 10000, 1000, 64)
	return []snapshotCase{
		{"/16-full", full, plainOf(full)},
		{"/8-10000-scattered", s8, plainOf(s8)},
		{"/64-10000-scattered", s64, nil},
	}
}

func plainOf(a *Allocator) *plainBitmap {
	p := newPlainBitmap(a.Range())
	for o := range a.Offsets() {
		p.set(o)
	}
	return p
}

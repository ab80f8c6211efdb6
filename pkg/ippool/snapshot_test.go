package ippool

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// scattered allocates n offsets, each separated from the previous one by a
// random gap of 1 to maxGap free offsets, so every allocation is its own
// run: the worst case for the run encoding, as after long churn.
func scattered(t testing.TB, r *Range, n int, maxGap uint64, seed uint64) *Allocator {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	a := NewAllocator(r)
	var o uint64
	for range n {
		o += 2 + rng.Uint64N(maxGap) // at least one free offset between two
		for r.Excluded(o) {
			o++
		}
		if err := a.Allocate(o); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// uniform allocates n offsets drawn uniformly from the whole range.
func uniform(t testing.TB, r *Range, n uint64) *Allocator {
	t.Helper()
	rng := rand.New(rand.NewPCG(n, n))
	a := NewAllocator(r)
	for a.Count() < n {
		o := rng.Uint64N(r.Last() + 1)
		if !a.Has(o) && !r.Excluded(o) {
			if err := a.Allocate(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a
}

// The pools whose snapshot sizes docs/benchmarks.md reports.
var (
	slash16 = Spec{CIDR: "10.20.0.0/16"}
	slash8  = Spec{CIDR: "10.0.0.0/8"}
	slash64 = Spec{CIDR: "2001:db8:0:1::/64"}
)

func fullSlash16(t testing.TB) *Allocator {
	t.Helper()
	a := NewAllocator(MustNewRange(slash16))
	for range a.Range().Size() {
		if _, err := a.AllocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func TestSnapshotSizes(t *testing.T) {
	tests := []struct {
		name  string
		alloc func(testing.TB) *Allocator
		limit int
	}{
		{"/16 fully allocated", fullSlash16, 1 << 10},
		{"/8 with 10000 scattered", func(t testing.TB) *Allocator { return scattered(t, MustNewRange(slash8), 10000, 1000, 8) }, 64 << 10},
		{"/64 with 10000 scattered", func(t testing.TB) *Allocator { return scattered(t, MustNewRange(slash64), 10000, 1000, 64) }, 64 << 10},
		{"/8 with 10000 uniform", func(t testing.TB) *Allocator { return uniform(t, MustNewRange(slash8), 10000) }, 64 << 10},
		// 10,000 positions drawn from 2^64 carry about 52 bits each: no
		// encoding fits 64 KiB of base64. The bound keeps the encoding within
		// 20% of that floor and far below etcd's 1.5 MiB object limit.
		{"/64 with 10000 uniform", func(t testing.TB) *Allocator { return uniform(t, MustNewRange(slash64), 10000) }, 108 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.alloc(t)
			s := a.Snapshot()
			t.Logf("%s: %d allocated in %d runs, snapshot %d bytes", tt.name, a.Count(), len(a.runs), len(s))
			if len(s) >= tt.limit {
				t.Fatalf("snapshot is %d bytes, want < %d", len(s), tt.limit)
			}
			b := NewAllocator(a.Range())
			if err := b.Restore(s); err != nil || !a.Equal(b) {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
}

func TestSnapshotEmptyAndRoundTrip(t *testing.T) {
	r := MustNewRange(Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.9"}})
	a := NewAllocator(r)
	if s := a.Snapshot(); s != "" {
		t.Fatalf("empty snapshot %q", s)
	}
	for _, o := range []uint64{0, 1, 2, 9, 10, 200, 253} {
		if err := a.Allocate(o); err != nil {
			t.Fatal(err)
		}
	}
	b := NewAllocator(r)
	_ = b.Allocate(100)
	if err := b.Restore(a.Snapshot()); err != nil || !a.Equal(b) {
		t.Fatalf("Restore: %v", err)
	}
	if err := b.Restore(""); err != nil || b.Count() != 0 {
		t.Fatalf("Restore(empty) = %v, count %d", err, b.Count())
	}
}

func TestRestoreRejects(t *testing.T) {
	r := MustNewRange(Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.9"}})
	a := NewAllocator(r)
	_ = a.Allocate(3)
	good := a.Snapshot()
	other := NewAllocator(MustNewRange(Spec{CIDR: "10.0.0.0/24"}))
	_ = other.Allocate(3)

	tests := []struct {
		name     string
		snapshot string
		want     error
	}{
		{"another range", other.Snapshot(), ErrSnapshotMismatch},
		{"not base64", "!!!", ErrInvalidSnapshot},
		{"short", base64.StdEncoding.EncodeToString([]byte{1, 2}), ErrInvalidSnapshot},
		{"version", reversion(t, good, 9), ErrInvalidSnapshot},
		{"excluded offset", encode(r, 1, 8, 0), ErrInvalidSnapshot},      // offset 8 is 10.0.0.9
		{"past the end", encode(r, 1, 250, 10), ErrInvalidSnapshot},      // runs to 260
		{"touching runs", encode(r, 2, 0, 0, 0, 0), ErrInvalidSnapshot},  // 0 then 1 with no gap
		{"truncated", encode(r, 2, 0, 0), ErrInvalidSnapshot},            // 2 runs announced, 1 given
		{"trailing", encode(r, 1, 0, 0, 0, 5, 5, 5), ErrInvalidSnapshot}, // bytes after the runs
		{"zero runs", encode(r, 0), ErrInvalidSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewAllocator(r)
			_ = b.Allocate(7)
			before := b.Clone()
			if err := b.Restore(tt.snapshot); !errors.Is(err, tt.want) {
				t.Fatalf("Restore = %v, want %v", err, tt.want)
			}
			if !b.Equal(before) {
				t.Fatal("a failed Restore changed the allocator")
			}
		})
	}
}

func reversion(t *testing.T, s string, v byte) string {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	raw[0] = v
	return base64.StdEncoding.EncodeToString(raw)
}

// encode builds a snapshot of r from raw varints, valid or not.
func encode(r *Range, varints ...uint64) string {
	var payload []byte
	for _, v := range varints {
		payload = binary.AppendUvarint(payload, v)
	}
	var buf bytes.Buffer
	buf.WriteByte(snapshotVersion)
	_ = binary.Write(&buf, binary.BigEndian, r.fingerprint())
	zw, _ := flate.NewWriter(&buf, flate.BestSpeed)
	_, _ = zw.Write(payload)
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func FuzzSnapshotRestore(f *testing.F) {
	r := MustNewRange(Spec{CIDR: "10.0.0.0/20", Exclude: []string{"10.0.1.0/24", "10.0.3.7"}})
	a := NewAllocator(r)
	for _, o := range []uint64{0, 1, 2, 5, 600, 4000} {
		_ = a.Allocate(o)
	}
	f.Add(a.Snapshot())
	f.Add("")
	f.Add(encode(r, 1, 0, 3))
	f.Add(encode(r, 2, 1, 0, 7, 2))
	f.Fuzz(func(t *testing.T, s string) {
		b := NewAllocator(r)
		if err := b.Restore(s); err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) && !errors.Is(err, ErrSnapshotMismatch) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		checkInvariant(t, b)
		c := NewAllocator(r)
		if err := c.Restore(b.Snapshot()); err != nil || !b.Equal(c) {
			t.Fatalf("re-snapshot did not round-trip: %v", err)
		}
	})
}

// FuzzAllocatorOps checks the invariant and a snapshot round trip after an
// arbitrary sequence of operations.
func FuzzAllocatorOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 200, 201, 17})
	f.Add([]byte{255, 0, 255, 0, 128})
	r := MustNewRange(Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.64/27", "10.0.0.100"}})
	f.Fuzz(func(t *testing.T, ops []byte) {
		a := NewAllocator(r)
		for i := 0; i+1 < len(ops); i += 2 {
			o := uint64(ops[i+1])
			switch ops[i] % 3 {
			case 0:
				_ = a.Allocate(o)
			case 1:
				_, _ = a.AllocateNext()
			default:
				_ = a.Release(o)
			}
			checkInvariant(t, a)
		}
		b := NewAllocator(r)
		if err := b.Restore(a.Snapshot()); err != nil || !a.Equal(b) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

package ippool

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
)

// The snapshot format, version 1, before base64 (standard encoding):
//
//	byte 0      version (1)
//	bytes 1-8   fingerprint of the Range, big-endian
//	bytes 9-    DEFLATE stream of unsigned varints:
//	              number of runs,
//	              then per run: gap from the end of the previous run
//	              (from offset 0 for the first), and length - 1.
//
// Runs are written in increasing order and never touch, so every gap after
// the first run is at least 1; a decoder rejects anything else, which keeps
// one snapshot per set. An empty set is the empty string.
const snapshotVersion = 1

// maxSnapshotPayload bounds the decompressed payload so that a hostile
// snapshot cannot exhaust memory: 20 bytes per run, far above the 1.5 MiB an
// etcd object may hold.
const maxSnapshotPayload = 64 << 20

// flateWriters reuses compressors: a new one allocates about 800 KiB, which
// dominated the cost of a snapshot.
var flateWriters = sync.Pool{New: func() any {
	zw, _ := flate.NewWriter(nil, flate.BestCompression) // the level is valid
	return zw
}}

// Snapshot returns the allocated offsets as a compact, versioned string for a
// NodeIPPool's status.allocatedOffsets. Its size grows with the number of
// runs of consecutive allocations, not with the size of the range.
func (a *Allocator) Snapshot() string {
	if len(a.runs) == 0 {
		return ""
	}
	var payload []byte
	payload = binary.AppendUvarint(payload, uint64(len(a.runs)))
	var next uint64 // first offset after the previous run
	for _, run := range a.runs {
		payload = binary.AppendUvarint(payload, run.lo-next)
		payload = binary.AppendUvarint(payload, run.hi-run.lo)
		next = run.hi + 1 // wraps only after the last possible run
	}
	var buf bytes.Buffer
	buf.WriteByte(snapshotVersion)
	_ = binary.Write(&buf, binary.BigEndian, a.r.fingerprint())
	zw := flateWriters.Get().(*flate.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(payload) // writes to a bytes.Buffer do not fail
	_ = zw.Close()
	flateWriters.Put(zw)
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// Restore replaces the allocated offsets with those of snapshot. It fails
// with ErrSnapshotMismatch if the snapshot was taken of another range and
// with ErrInvalidSnapshot if it cannot be decoded or names an offset the
// range cannot hold; on error nothing changes.
func (a *Allocator) Restore(snapshot string) error {
	runs, count, err := decodeSnapshot(a.r, snapshot)
	if err != nil {
		return err
	}
	a.runs, a.count = runs, count
	return nil
}

func decodeSnapshot(r *Range, snapshot string) ([]span, uint64, error) {
	if snapshot == "" {
		return nil, 0, nil
	}
	raw, err := base64.StdEncoding.DecodeString(snapshot)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: not base64: %w", ErrInvalidSnapshot, err)
	}
	if len(raw) < 9 {
		return nil, 0, fmt.Errorf("%w: %d bytes is too short for a header", ErrInvalidSnapshot, len(raw))
	}
	if raw[0] != snapshotVersion {
		return nil, 0, fmt.Errorf("%w: unknown version %d", ErrInvalidSnapshot, raw[0])
	}
	if got, want := binary.BigEndian.Uint64(raw[1:9]), r.fingerprint(); got != want {
		return nil, 0, fmt.Errorf("%w: fingerprint %016x, range %s has %016x", ErrSnapshotMismatch, got, r, want)
	}
	payload, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw[9:])), maxSnapshotPayload+1))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalidSnapshot, err)
	}
	if len(payload) > maxSnapshotPayload {
		return nil, 0, fmt.Errorf("%w: payload larger than %d bytes", ErrInvalidSnapshot, maxSnapshotPayload)
	}
	return decodeRuns(r, payload)
}

var errTruncated = errors.New("truncated")

func decodeRuns(r *Range, payload []byte) ([]span, uint64, error) {
	rd := bytes.NewReader(payload)
	read := func() (uint64, error) {
		v, err := binary.ReadUvarint(rd)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidSnapshot, errTruncated)
		}
		return v, nil
	}
	n, err := read()
	if err != nil {
		return nil, 0, err
	}
	// Each run takes at least two bytes, which bounds n before allocating.
	if n == 0 || n > uint64(rd.Len())/2 {
		return nil, 0, fmt.Errorf("%w: %d runs in %d bytes", ErrInvalidSnapshot, n, rd.Len())
	}
	runs := make([]span, 0, n)
	var next, count uint64
	for i := range n {
		gap, err := read()
		if err != nil {
			return nil, 0, err
		}
		length, err := read()
		if err != nil {
			return nil, 0, err
		}
		if i > 0 && (gap == 0 || next == 0) {
			return nil, 0, fmt.Errorf("%w: run %d touches or overlaps the previous one", ErrInvalidSnapshot, i)
		}
		lo := next + gap
		hi := lo + length
		if lo < next || hi < lo || hi > r.last {
			return nil, 0, fmt.Errorf("%w: run %d reaches past the last offset %d", ErrInvalidSnapshot, i, r.last)
		}
		if s, ok := r.firstExcludedIn(span{lo: lo, hi: hi}); ok {
			return nil, 0, fmt.Errorf("%w: offset %d is excluded", ErrInvalidSnapshot, s)
		}
		runs = append(runs, span{lo: lo, hi: hi})
		count += length + 1
		next = hi + 1
		if hi == math.MaxUint64 && i+1 < n {
			return nil, 0, fmt.Errorf("%w: runs after the last offset", ErrInvalidSnapshot)
		}
	}
	if rd.Len() != 0 {
		return nil, 0, fmt.Errorf("%w: %d trailing bytes", ErrInvalidSnapshot, rd.Len())
	}
	return runs, count, nil
}

// firstExcludedIn returns the first excluded offset inside s, if any.
func (r *Range) firstExcludedIn(s span) (uint64, bool) {
	i := sort.Search(len(r.excluded), func(i int) bool { return r.excluded[i].hi >= s.lo })
	if i < len(r.excluded) && r.excluded[i].lo <= s.hi {
		return max(r.excluded[i].lo, s.lo), true
	}
	return 0, false
}

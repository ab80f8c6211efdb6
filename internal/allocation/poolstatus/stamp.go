package poolstatus

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"slices"
	"strings"
	"time"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// stampVersion prefixes every stamp, so a later format can be told apart.
const stampVersion = "v1."

// Stamp computes the stamp that vouches for a pool's allocation state: its
// UID, status.allocatedOffsets, status.inFlight and status.quarantined
// (what lifts a quarantine included). It is a digest, not a signature: it
// catches hand edits and statuses copied from another pool, not a writer
// that recomputes it on purpose (RBAC on nodeippools/status is what keeps
// those out).
func Stamp(pool *ippoolv1.NodeIPPool) string {
	h := sha256.New()
	field(h, string(pool.UID))
	field(h, pool.Status.AllocatedOffsets)
	inFlight := slices.Clone(pool.Status.InFlight)
	slices.SortFunc(inFlight, func(a, b ippoolv1.InFlightAddress) int { return strings.Compare(a.IP, b.IP) })
	for _, e := range inFlight {
		field(h, "f", e.IP, e.HolderName(), e.Token, e.Since.UTC().Format(time.RFC3339))
		if e.Returning != nil {
			// Only when set, so that older entries keep their stamps.
			field(h, "r", e.Returning.Node, e.Returning.HolderName())
		}
		if e.Kept != nil {
			field(h, "k", e.Kept.Node, e.Kept.HolderName(), e.Kept.Capture)
		}
	}
	quarantined := slices.Clone(pool.Status.Quarantined)
	slices.SortFunc(quarantined, func(a, b ippoolv1.QuarantinedAddress) int { return strings.Compare(a.IP, b.IP) })
	for _, q := range quarantined {
		field(h, "q", q.IP, q.Node, q.HolderName(), q.Since.UTC().Format(time.RFC3339))
		if q.StateSeenAtRelease != nil {
			// Only when set, so that older entries keep their stamps.
			field(h, "s", q.StateSeenAtRelease.UTC().Format(time.RFC3339))
		}
	}
	return stampVersion + hex.EncodeToString(h.Sum(nil))[:32]
}

// Vouched reports whether the pool's status carries the stamp of its
// current allocation state: it was last written by the pool controller or
// a handler, not by hand.
func Vouched(pool *ippoolv1.NodeIPPool) bool {
	return pool.Status.Stamp != "" && pool.Status.Stamp == Stamp(pool)
}

// field writes length-prefixed strings, so that no two different inputs
// hash alike.
func field(h hash.Hash, parts ...string) {
	for _, p := range parts {
		var n [8]byte
		for i, l := 0, len(p); i < 8; i, l = i+1, l>>8 {
			n[i] = byte(l)
		}
		h.Write(n[:])
		h.Write([]byte(p))
	}
}

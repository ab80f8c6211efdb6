package poolwrite

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// Recorded tells the Writer that the in-flight entry of ip in the pool
// incarnation uid, taken for holder (its HolderName) under token, is now
// recorded by that holder, durably, and that nothing of the holder's
// relies on the entry any more: no restore of the address is under way.
// The next write of that pool that this Writer makes anyway removes the
// entry if it is still that one (same holder and token), and notes
// evidence as the audit trail's reason; it never writes for that alone.
// The pool controller prunes the entries nobody told of, as before, from
// its own reads of every holder's record: a prune told here saves those
// reads and keeps a burst's writes small. What is told is forgotten after
// a write that settles it, after forgetRecordedAfter (the pool controller
// has pruned it by then), and at a restart. Safe for concurrent use.
func (w *Writer) Recorded(uid types.UID, ip, holder, token, evidence string) {
	w.recorded.mu.Lock()
	defer w.recorded.mu.Unlock()
	if w.recorded.byPool == nil {
		w.recorded.byPool = map[types.UID]map[string]recordedEntry{}
	}
	if w.recorded.byPool[uid] == nil {
		w.recorded.byPool[uid] = map[string]recordedEntry{}
	}
	w.recorded.byPool[uid][ip] = recordedEntry{holder: holder, token: token, evidence: evidence, at: w.Clock.Now()}
}

// NotRecorded takes back what Recorded told of ip, in whatever pool: its
// holder relies on its entry again (a restore) or lets the address go (a
// release), and the entry is left to the pool controller's rules. A write
// already under way may still prune it.
func (w *Writer) NotRecorded(ip string) {
	w.recorded.mu.Lock()
	defer w.recorded.mu.Unlock()
	for _, told := range w.recorded.byPool {
		delete(told, ip)
	}
}

// recordedEntries are the entries told recorded, by pool incarnation and
// address.
type recordedEntries struct {
	mu     sync.Mutex
	byPool map[types.UID]map[string]recordedEntry
}

type recordedEntry struct {
	holder, token, evidence string
	at                      time.Time
}

// forgetRecordedAfter is how long a Writer keeps what it was told of an
// entry that none of its writes settles: the pool controller prunes a
// recorded entry within seconds.
const forgetRecordedAfter = time.Minute

// prune removes from pool the in-flight entries told recorded that it
// still has, unchanged, and returns why, by address; nothing unless
// stamped, when the write stamps the status it makes (an unreadable or
// unvouched one is left to the rebuild).
func (r *recordedEntries) prune(pool *ippoolv1.NodeIPPool, stamped bool) audit.Notes {
	notes := audit.Notes{}
	if !stamped {
		return notes
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ip, told := range r.byPool[pool.UID] {
		if told.holds(pool, ip) {
			poolstatus.RemoveInFlight(pool, ip)
			notes.Set(ip, "Recorded", told.evidence)
		}
	}
	return notes
}

// forget drops, after a write of pool at now, what was told of the
// entries the written status no longer has as told (pruned, or settled by
// someone else), and of any pool, what was told longer than
// forgetRecordedAfter ago.
func (r *recordedEntries) forget(pool *ippoolv1.NodeIPPool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, told := range r.byPool {
		for ip, e := range told {
			if uid == pool.UID && !e.holds(pool, ip) || now.Sub(e.at) > forgetRecordedAfter {
				delete(told, ip)
			}
		}
		if len(told) == 0 {
			delete(r.byPool, uid)
		}
	}
}

// holds reports whether pool's in-flight entry of ip is the one told of.
func (e recordedEntry) holds(pool *ippoolv1.NodeIPPool, ip string) bool {
	in := poolstatus.InFlightOf(pool, ip)
	return in != nil && in.HolderName() == e.holder && in.Token == e.token
}

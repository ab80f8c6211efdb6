// Package audit is the trail of who holds which address: every change a
// pool status write makes to an address's holding, found by comparing the
// status before and after the write, so that it covers every writer (the
// pool controller, self-allocating handlers) and every kind of holder
// (enactments, pooled policies' nodes, Cluster API claims) without any of
// them reporting it. Each change is one log line of a fixed schema
// (docs/audit.md) and an Event on its holder.
//
// Why a change happened is the writer's to say: a write made under a
// context carrying WithReason gives its changes that reason and evidence.
package audit

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// An Event is what happened to an address's holding.
type Event string

// The events, in the order of an address's life. A holder takes an
// address (an in-flight entry), then records it (the entry goes, the
// address stays allocated) or withdraws it; an entry whose holder is gone
// or changed is forgotten (the address stays allocated until a record
// or garbage collection decides); a release quarantines it
// until evidence lifts it, or keeps it for the holder's return; an
// address the pool learns of otherwise (a rebuild from the records, an
// adoption) is allocated, and one nothing holds any more is freed.
const (
	Taken       Event = "taken"
	Recorded    Event = "recorded"
	Withdrawn   Event = "withdrawn"
	Forgotten   Event = "forgotten"
	Quarantined Event = "quarantined"
	Lifted      Event = "lifted"
	Kept        Event = "kept"
	Reclaimed   Event = "reclaimed"
	Expired     Event = "expired"
	Allocated   Event = "allocated"
	Freed       Event = "freed"
)

// A Change is one change of an address's holding: one line of the trail.
type Change struct {
	Event   Event
	Pool    string
	Address netip.Addr
	// Holder is who takes, records, releases or regains the address; the
	// zero Ref when the pool status does not say (an address allocated by
	// a rebuild, or freed by garbage collection).
	Holder holder.Ref
	// Node is the holder's node, when the status names it.
	Node string
	// Reason and Evidence are the writer's (WithReason).
	Reason, Evidence string
	// At is when the write that made the change succeeded.
	At time.Time
}

type reasonKey struct{}

type why struct {
	reason, evidence string
	// forgotten: an in-flight entry that goes while its address stays
	// allocated is forgotten, not recorded.
	forgotten bool
}

// WithReason returns a context whose pool writes report their changes
// with reason (a word: Released, Reset, GarbageCollected...) and evidence
// (what decided it: the NodeNetworkState that no longer carries the
// address, the Node that is gone).
func WithReason(ctx context.Context, reason, evidence string) context.Context {
	return context.WithValue(ctx, reasonKey{}, why{reason: reason, evidence: evidence})
}

// Default returns ctx with reason and evidence when ctx has no reason of
// its own: a writer's operation gives its usual reason, and a caller that
// knows more gives its own.
func Default(ctx context.Context, reason, evidence string) context.Context {
	if _, ok := ctx.Value(reasonKey{}).(why); ok {
		return ctx
	}
	return WithReason(ctx, reason, evidence)
}

// reasonOf returns the reason and evidence of a change of ip: its note
// (WithNotes), else the write's (WithReason).
func reasonOf(ctx context.Context, ip netip.Addr) (string, string) {
	if n, ok := ctx.Value(notesKey{}).(Notes); ok {
		if w, ok := n[ip]; ok {
			return w.reason, w.evidence
		}
	}
	w, _ := ctx.Value(reasonKey{}).(why)
	return w.reason, w.evidence
}

// forgotten reports whether ip's note says its in-flight entry is
// forgotten.
func forgotten(ctx context.Context, ip netip.Addr) bool {
	n, _ := ctx.Value(notesKey{}).(Notes)
	return n[ip].forgotten
}

// Notes are the reasons and evidence of a write's changes, address by
// address, for a write that decides each address on its own grounds (the
// pool controller's maintenance: a quarantine lifted on a node's state,
// an address collected after the grace period).
type Notes map[netip.Addr]why

type notesKey struct{}

// WithNotes returns a context whose pool writes take the reasons of their
// changes from notes, which the write's mutation may still fill.
func WithNotes(ctx context.Context, notes Notes) context.Context {
	return context.WithValue(ctx, notesKey{}, notes)
}

// AddNotes returns ctx with notes added to those it has (WithNotes), as
// they are now: a note of notes wins over one of ctx for the same
// address.
func AddNotes(ctx context.Context, notes Notes) context.Context {
	if len(notes) == 0 {
		return ctx
	}
	had, _ := ctx.Value(notesKey{}).(Notes)
	all := make(Notes, len(had)+len(notes))
	maps.Copy(all, had)
	maps.Copy(all, notes)
	return WithNotes(ctx, all)
}

// Set notes why the address ip (as a string; an unparsable one is
// ignored) changes hands.
func (n Notes) Set(ip, reason, evidence string) {
	if a, err := ippool.ParseAddr(ip); err == nil {
		n[a] = why{reason: reason, evidence: evidence}
	}
}

// Forget notes that the in-flight entry of ip goes unrecorded: its holder
// is gone or changed, and the address is left to garbage collection.
func (n Notes) Forget(ip, reason, evidence string) {
	if a, err := ippool.ParseAddr(ip); err == nil {
		n[a] = why{reason: reason, evidence: evidence, forgotten: true}
	}
}

// Keep notes the reasons of changes already found, address by address: a
// write that makes the changes of several callers at once gives each
// address the reason of the caller that changed it.
func (n Notes) Keep(changes []Change) {
	for _, c := range changes {
		n[c.Address] = why{reason: c.Reason, evidence: c.Evidence, forgotten: c.Event == Forgotten}
	}
}

// Changes compares a pool's status and bitmap before and after a write
// and returns the changes of holdings it made, ordered by address.
func Changes(ctx context.Context, pool string, r *ippool.Range, before, after *ippoolv1.NodeIPPoolStatus,
	beforeBits, afterBits *ippool.Allocator, at time.Time) []Change {
	was, is := entriesOf(before), entriesOf(after)
	set, cleared := bitChanges(r, beforeBits, afterBits)
	var out []Change
	add := func(ev Event, ip netip.Addr, h *slot) {
		reason, evidence := reasonOf(ctx, ip)
		c := Change{Event: ev, Pool: pool, Address: ip, Reason: reason, Evidence: evidence, At: at}
		if h != nil {
			c.Holder, c.Node = h.holder, h.node
		}
		out = append(out, c)
	}
	for _, ip := range addresses(was, is, set, cleared) {
		old, now := was[ip], is[ip]
		switch {
		case now.inFlight != nil && old.inFlight == nil:
			add(Taken, ip, now.inFlight)
		case old.inFlight != nil && now.inFlight == nil && cleared[ip]:
			add(Withdrawn, ip, old.inFlight)
		case old.inFlight != nil && now.inFlight == nil && forgotten(ctx, ip):
			add(Forgotten, ip, old.inFlight)
		case old.inFlight != nil && now.inFlight == nil:
			add(Recorded, ip, old.inFlight)
		}
		// A quarantine lifted with the address still allocated was taken
		// back by its holder, or by another once its node confirmed it
		// gone: the new in-flight entry says who.
		switch {
		case now.quarantined != nil && old.quarantined == nil:
			add(Quarantined, ip, now.quarantined)
		case old.quarantined != nil && now.quarantined == nil:
			add(Lifted, ip, old.quarantined)
		}
		switch {
		case now.kept != nil && old.kept == nil:
			add(Kept, ip, now.kept)
		case old.kept != nil && now.kept == nil && cleared[ip]:
			add(Expired, ip, old.kept)
		case old.kept != nil && now.kept == nil:
			add(Reclaimed, ip, old.kept)
		}
		if old.any() || now.any() {
			continue
		}
		switch {
		case set[ip]:
			add(Allocated, ip, nil)
		case cleared[ip]:
			add(Freed, ip, nil)
		}
	}
	return out
}

// entry is what a status's entries say of one address: who holds it in
// flight, in quarantine and kept for return.
type entry struct {
	inFlight, quarantined, kept *slot
}

// slot is one entry's holder and node.
type slot struct {
	holder holder.Ref
	node   string
}

func (e entry) any() bool { return e.inFlight != nil || e.quarantined != nil || e.kept != nil }

// entriesOf indexes a status's in-flight, quarantined and kept entries by
// address.
func entriesOf(s *ippoolv1.NodeIPPoolStatus) map[netip.Addr]entry {
	out := map[netip.Addr]entry{}
	if s == nil {
		return out
	}
	note := func(ip string, change func(*entry)) {
		a, err := ippool.ParseAddr(ip)
		if err != nil {
			return
		}
		e := out[a]
		change(&e)
		out[a] = e
	}
	for _, f := range s.InFlight {
		note(f.IP, func(e *entry) { e.inFlight = &slot{holder: holder.Parse(f.HolderName())} })
	}
	for _, q := range s.Quarantined {
		note(q.IP, func(e *entry) { e.quarantined = &slot{holder.Parse(q.HolderName()), q.Node} })
	}
	for _, k := range s.KeptForReturn {
		note(k.IP, func(e *entry) { e.kept = &slot{holder.Parse(k.HolderName()), k.Node} })
	}
	return out
}

// bitChanges returns the addresses the write allocated and released.
func bitChanges(r *ippool.Range, before, after *ippool.Allocator) (set, cleared map[netip.Addr]bool) {
	set, cleared = map[netip.Addr]bool{}, map[netip.Addr]bool{}
	if r == nil || before == nil || after == nil {
		return set, cleared
	}
	for o := range after.Offsets() {
		if !before.Has(o) {
			if ip, err := r.IP(o); err == nil {
				set[ip] = true
			}
		}
	}
	for o := range before.Offsets() {
		if !after.Has(o) {
			if ip, err := r.IP(o); err == nil {
				cleared[ip] = true
			}
		}
	}
	return set, cleared
}

// addresses returns every address the entries or the bitmaps' changes
// name.
func addresses(was, is map[netip.Addr]entry, set, cleared map[netip.Addr]bool) []netip.Addr {
	all := map[netip.Addr]bool{}
	for ip := range was {
		all[ip] = true
	}
	for ip := range is {
		all[ip] = true
	}
	for ip := range set {
		all[ip] = true
	}
	for ip := range cleared {
		all[ip] = true
	}
	out := make([]netip.Addr, 0, len(all))
	for ip := range all {
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

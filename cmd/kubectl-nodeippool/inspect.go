package main

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// States of an address in show and decode.
const (
	stateAllocated   = "allocated"   // set, and recorded by one enactment
	stateUnclaimed   = "unclaimed"   // set, recorded by none and held by no entry: a leak
	stateInFlight    = "in-flight"   // set, taken by a handler, not recorded yet
	stateQuarantined = "quarantined" // set, taken from its holder, kept until it is gone from the holder's network
	stateMissing     = "missing"     // recorded, not set: the index is broken
	stateCollision   = "collision"   // recorded by several enactments
	stateOutside     = "outside"     // recorded, but the range does not hand it out
	stateFree        = "free"
	stateKept        = "kept"     // free, kept for the return of a deleted node; others get it last
	stateExcluded    = "excluded" // excluded or reserved: never handed out
)

// poolSummary is a row of list.
type poolSummary struct {
	Name      string `json:"name"`
	CIDR      string `json:"cidr"`
	Range     string `json:"range"`
	Size      int64  `json:"size"`
	Allocated int64  `json:"allocated"`
	Free      int64  `json:"free"`
	Available string `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
}

func summarize(p *ippoolv1.NodeIPPool) poolSummary {
	s := poolSummary{Name: p.Name, CIDR: p.Spec.Range.CIDR, Size: p.Status.Size, Allocated: p.Status.Allocated,
		Free: p.Status.Free, Available: "Unknown"}
	if rng, err := poolstatus.Range(p); err == nil {
		s.Range = rng.Start().String() + "-" + rng.End().String()
	} else {
		s.Range = "invalid: " + err.Error()
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionAvailable); c != nil {
		s.Available, s.Reason, s.Message = string(c.Status), c.Reason, c.Message
	}
	return s
}

// addressRow is one address of show: its offset, state and holders.
type addressRow struct {
	// Offset is empty for an address outside the range.
	Offset  string             `json:"offset"`
	IP      string             `json:"ip"`
	State   string             `json:"state"`
	Holders []poolstatus.Owner `json:"holders,omitempty"`
	// KeptFor is the deleted node's enactment a kept address waits for.
	KeptFor *ippoolv1.KeptAddress `json:"keptFor,omitempty"`
	// Quarantine is a quarantined address's entry, and Why says what it
	// waits for.
	Quarantine *ippoolv1.QuarantinedAddress `json:"quarantine,omitempty"`
	Why        string                       `json:"why,omitempty"`
}

// poolDetail is the output of show.
type poolDetail struct {
	poolSummary
	// Releases is the ReleasesConfirmed condition, "Status Reason:
	// message"; empty while the pool has none.
	Releases     string       `json:"releases,omitempty"`
	PrefixLength int          `json:"prefixLength"`
	Addresses    []addressRow `json:"addresses"`
	// Truncated is set when the bitmap holds more than maxListed addresses;
	// the rest are not listed.
	Truncated bool `json:"truncated,omitempty"`
}

// maxListed bounds the addresses show lists, so that a bitmap with a huge
// run (a hand edit) cannot make the plugin walk every offset.
const maxListed = poolstatus.MaxUnclaimedListed

// inspected is a pool with its allocator, claims and audit.
type inspected struct {
	pool   *ippoolv1.NodeIPPool
	alloc  *ippool.Allocator
	owners poolstatus.Owners
	audit  poolstatus.Audit
}

// inspect restores a pool's bitmap and compares it with the enactments.
func inspect(p *ippoolv1.NodeIPPool, records []holder.Record) (*inspected, error) {
	alloc, err := poolstatus.Allocator(p)
	if err != nil {
		return nil, fmt.Errorf("NodeIPPool %s: %w", p.Name, err)
	}
	owners := poolstatus.OwnersOf(p.Name, alloc.Range(), records)
	return &inspected{pool: p, alloc: alloc, owners: owners, audit: poolstatus.AuditPool(p.Name, alloc, owners)}, nil
}

// detail lists every address that is set or recorded, in offset order,
// with its state and holders.
func (in *inspected) detail() poolDetail {
	d := poolDetail{poolSummary: summarize(in.pool), PrefixLength: in.alloc.Range().Prefix().Bits()}
	if c := meta.FindStatusCondition(in.pool.Status.Conditions, ippoolv1.ConditionReleasesConfirmed); c != nil {
		d.Releases = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
	rng := in.alloc.Range()
	seen := map[netip.Addr]bool{}
	var ips []netip.Addr
	for off := range in.alloc.Offsets() {
		if len(ips) >= maxListed {
			d.Truncated = true
			break
		}
		ip, _ := rng.IP(off)
		seen[ip] = true
		ips = append(ips, ip)
	}
	for _, k := range in.pool.Status.KeptForReturn {
		if ip, err := netip.ParseAddr(k.IP); err == nil && !seen[ip] && len(ips) < maxListed {
			seen[ip] = true
			ips = append(ips, ip)
		}
	}
	for ip := range in.owners {
		if !seen[ip] {
			ips = append(ips, ip)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		d.Addresses = append(d.Addresses, in.row(ip))
	}
	return d
}

// row describes one address.
func (in *inspected) row(ip netip.Addr) addressRow {
	rng := in.alloc.Range()
	r := addressRow{IP: ip.String(), Holders: in.owners[ip]}
	off, err := rng.Offset(ip)
	if err == nil {
		r.Offset = strconv.FormatUint(off, 10)
	}
	_, assignErr := rng.Assignable(ip)
	set := err == nil && in.alloc.Has(off)
	switch {
	case len(r.Holders) > 1:
		r.State = stateCollision
	case len(r.Holders) == 1 && assignErr != nil:
		r.State = stateOutside
	case len(r.Holders) == 1 && !set:
		r.State = stateMissing
	case len(r.Holders) == 1:
		r.State = stateAllocated
	case set && poolstatus.InFlightOf(in.pool, r.IP) != nil:
		r.State = stateInFlight
	case set && poolstatus.QuarantineOf(in.pool, r.IP) != nil:
		r.State, r.Quarantine = stateQuarantined, poolstatus.QuarantineOf(in.pool, r.IP)
		r.Why = quarantineWhy(r.Quarantine)
	case set:
		r.State = stateUnclaimed
	case assignErr != nil:
		r.State = stateExcluded
	case poolstatus.KeptOf(in.pool, r.IP) != nil:
		r.State, r.KeptFor = stateKept, poolstatus.KeptOf(in.pool, r.IP)
	default:
		r.State = stateFree
	}
	return r
}

// decodeArg answers decode: an offset or an address of the pool, both
// ways, with its state and holders.
func (in *inspected) decodeArg(arg string) (addressRow, error) {
	rng := in.alloc.Range()
	if off, err := strconv.ParseUint(arg, 10, 64); err == nil {
		ip, err := rng.IP(off)
		if err != nil {
			return addressRow{}, fmt.Errorf("NodeIPPool %s: %w", in.pool.Name, err)
		}
		return in.row(ip), nil
	}
	ip, err := netip.ParseAddr(arg)
	if err != nil {
		return addressRow{}, fmt.Errorf("%q is neither an offset nor an IP address", arg)
	}
	if _, err := rng.Offset(ip); err != nil && len(in.owners[ip]) == 0 {
		return addressRow{}, fmt.Errorf("%s is not in NodeIPPool %s (%s)", ip, in.pool.Name, rng)
	}
	return in.row(ip), nil
}

// problems lists every mismatch between the pool's status and the
// enactments, in words.
func (in *inspected) problems() []string {
	var out []string
	rng := in.alloc.Range()
	holders := func(ip netip.Addr) string {
		names := make([]string, 0, len(in.owners[ip]))
		for _, o := range in.owners[ip] {
			if o.Holder.Foreign() {
				names = append(names, o.Holder.Title())
				continue
			}
			names = append(names, o.Holder.Name)
		}
		return strings.Join(names, " and ")
	}
	for _, ip := range in.audit.Missing {
		off, _ := rng.Offset(ip)
		out = append(out, fmt.Sprintf("%s (offset %d) is recorded by %s but not set in the bitmap", ip, off, holders(ip)))
	}
	held := 0
	for _, off := range in.audit.Unclaimed {
		ip, _ := rng.IP(off)
		if poolstatus.InFlightOf(in.pool, ip.String()) != nil || poolstatus.QuarantineOf(in.pool, ip.String()) != nil {
			held++ // an allocation in flight or a quarantined address: expected
			continue
		}
		out = append(out, fmt.Sprintf("%s (offset %d) is set in the bitmap but recorded by no holder", ip, off))
	}
	if more := in.audit.UnclaimedCount - uint64(len(in.audit.Unclaimed)); more > 0 {
		out = append(out, fmt.Sprintf("%d more offsets are set in the bitmap but recorded by no holder", more))
	}
	if !poolstatus.Vouched(in.pool) {
		out = append(out, "the status does not match its stamp (written by hand?): handlers allocate nothing until the pool controller has rebuilt it")
	}
	for _, ip := range in.audit.Collisions {
		out = append(out, fmt.Sprintf("%s is recorded by %s", ip, holders(ip)))
	}
	for _, ip := range in.audit.Outside {
		out = append(out, fmt.Sprintf("%s is recorded by %s but the range (%s) does not hand it out", ip, holders(ip), rng))
	}
	st, want := in.pool.Status, in.pool.DeepCopy()
	poolstatus.Set(want, in.alloc)
	if st.Size != want.Status.Size || st.Allocated != want.Status.Allocated || st.Free != want.Status.Free {
		out = append(out, fmt.Sprintf("status counts size=%d allocated=%d free=%d disagree with the bitmap (%d of %d allocated)",
			st.Size, st.Allocated, st.Free, in.alloc.Count(), rng.Size()))
	}
	return out
}

// poolCheck is the result of check for one pool: its problems, and notes
// on what the nodes carry of its range that no record holds (what becomes
// of each), which are not problems.
type poolCheck struct {
	Pool     string   `json:"pool"`
	Problems []string `json:"problems"`
	Notes    []string `json:"notes,omitempty"`
}

// checkAll checks every pool, against its holders' records and what the
// nodes' networks carry, and the holders that record addresses of pools
// that do not exist.
func checkAll(pools []ippoolv1.NodeIPPool, records []holder.Record, nets networks) []poolCheck {
	var out []poolCheck
	known := map[string]bool{}
	for i := range pools {
		p := &pools[i]
		known[p.Name] = true
		c := poolCheck{Pool: p.Name, Problems: []string{}}
		in, err := inspect(p, records)
		if err != nil {
			c.Problems = append(c.Problems, err.Error())
		} else {
			c.Problems = append(c.Problems, in.problems()...)
			problems, notes := onNetworks(p, in.alloc, records, nets)
			c.Problems, c.Notes = append(c.Problems, problems...), notes
		}
		out = append(out, c)
	}
	orphans := map[string][]string{}
	for _, rec := range records {
		for pool, held := range rec.Pools {
			if !known[pool] && len(held.Held()) > 0 {
				orphans[pool] = append(orphans[pool], fmt.Sprintf("%s records %s", rec.Holder, strings.Join(held.Held(), ", ")))
			}
		}
	}
	for _, pool := range slices.Sorted(maps.Keys(orphans)) {
		out = append(out, poolCheck{Pool: pool, Problems: []string{fmt.Sprintf("NodeIPPool %s does not exist, but %s", pool,
			strings.Join(orphans[pool], "; "))}})
	}
	return out
}

// errMismatch is returned by check when it found problems; the exit code
// is then 1.
var errMismatch = errors.New("the pools and the enactments disagree")

// quarantineWhy says what a quarantined address waits for: a hold of
// what a node carries and no holder records (no holder named), or a
// release (its holder's, handed back to it when it names a capture).
func quarantineWhy(q *ippoolv1.QuarantinedAddress) string {
	since := q.Since.UTC().Format(time.RFC3339)
	switch {
	case q.Node == "":
		return "released at " + since + " by no node; freed at the pool controller's next look"
	case q.HolderName() == "":
		return fmt.Sprintf("held since %s for node %s, whose network carries it and no holder records it: node %s adopts it "+
			"when a policy asks the pool for an address on that interface, and no other node gets it; freed once node %s "+
			"shows it gone, or its Node is gone past the departure hold", since, q.Node, q.Node, q.Node)
	case q.StateSeenAtRelease == nil:
		return fmt.Sprintf("released by %s on node %s at %s; the pool controller has not looked at node %s's network since",
			q.HolderName(), q.Node, since, q.Node)
	}
	back := "handed to nobody"
	if q.Capture != "" {
		back = fmt.Sprintf("handed to nobody but %s (capture %s), should it ask again,", q.HolderName(), q.Capture)
	}
	gone := "or its Node is gone past the departure hold"
	if q.Capture != "" {
		gone = "or its Node is gone past the departure hold (then kept for that return)"
	}
	return fmt.Sprintf("released by %s on node %s at %s; %s until node %s publishes a network state without it "+
		"(its state then was of %s), %s", q.HolderName(), q.Node, since, back, q.Node, q.StateSeenAtRelease.UTC().Format(time.RFC3339), gone)
}

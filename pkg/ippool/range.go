package ippool

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Spec is the user's description of a range, as in a NodeIPPool's
// spec.range. Empty Start and End mean the first and last usable address of
// the CIDR.
type Spec struct {
	CIDR    string
	Start   string
	End     string
	Exclude []string
	// Gateway, if set, is an address of the CIDR that is never handed out.
	Gateway string
}

// Range maps the addresses of a pool to offsets and back:
//
//	cidr 10.10.11.0/24, start .4, end .10, exclude [.5, .7]
//
//	  address  .4  .5  .6  .7  .8  .9  .10
//	  offset    0   1   2   3   4   5   6
//	             (x)     (x)                 x = excluded, never handed out
//
// Every address from start to end inclusive has an offset, so excluding an
// address never moves another one. IPv4 network and broadcast addresses (for
// prefixes up to /30) and the IPv6 subnet-router anycast address (for
// prefixes up to /126) are treated as excluded.
//
// A Range holds at most 2^64 addresses and at least one assignable address.
// It is immutable and safe for concurrent use.
type Range struct {
	prefix     netip.Prefix
	start, end netip.Addr
	first      u128   // start as an integer
	last       uint64 // largest offset: end - start
	excluded   []span // sorted, disjoint, non-adjacent, within [0, last]
	size       uint64 // assignable offsets, saturating at math.MaxUint64
	gateway    netip.Addr
}

// span is an inclusive interval of offsets. Inclusive bounds let a span end
// at math.MaxUint64 without overflow.
type span struct{ lo, hi uint64 }

func (s span) len() uint64 { return s.hi - s.lo + 1 } // wraps to 0 for a full 2^64 span

// NewRange validates spec and returns its Range. Every error wraps
// ErrInvalidRange and says which field to fix. The rules are the same as the
// NodeIPPool admission rules, plus ones admission cannot express (a range in
// which every address is excluded, a start past the defaulted end).
func NewRange(spec Spec) (*Range, error) {
	prefix, err := parsePrefix(spec.CIDR)
	if err != nil {
		return nil, fmt.Errorf("%w: cidr %q: %w", ErrInvalidRange, spec.CIDR, err)
	}
	if prefix.Masked() != prefix {
		return nil, fmt.Errorf("%w: cidr %q has host bits set: write %s", ErrInvalidRange, spec.CIDR, prefix.Masked())
	}
	r := &Range{prefix: prefix}
	firstUsable, lastUsable := usableBounds(prefix)
	if r.start, err = r.parseBound("start", spec.Start, firstUsable); err != nil {
		return nil, err
	}
	if r.end, err = r.parseBound("end", spec.End, lastUsable); err != nil {
		return nil, err
	}
	if r.end.Less(r.start) {
		return nil, fmt.Errorf("%w: start %s is after end %s: swap them or set both", ErrInvalidRange, r.start, r.end)
	}
	r.first = fromAddr(r.start)
	span := fromAddr(r.end).sub(r.first)
	if span.hi != 0 {
		return nil, fmt.Errorf("%w: range %s-%s holds more than 2^64 addresses: set start and end inside one /64",
			ErrInvalidRange, r.start, r.end)
	}
	r.last = span.lo
	exclude := spec.Exclude
	if spec.Gateway != "" {
		if r.gateway, err = r.parseGateway(spec.Gateway); err != nil {
			return nil, err
		}
		exclude = append(slices.Clone(exclude), r.gateway.String())
	}
	if err := r.setExcluded(exclude); err != nil {
		return nil, err
	}
	if r.size == 0 {
		return nil, fmt.Errorf("%w: every address of %s-%s is excluded or reserved: the pool could never hand one out",
			ErrInvalidRange, r.start, r.end)
	}
	return r, nil
}

// MustNewRange is NewRange for tests and static tables; it panics on error.
func MustNewRange(spec Spec) *Range {
	r, err := NewRange(spec)
	if err != nil {
		panic(err)
	}
	return r
}

// ParseAddr parses an address the way pools accept it: no zone, and no
// IPv4-mapped IPv6 form (::ffff:a.b.c.d), which would make one address have
// two spellings in two families.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has a zone; zones are not allowed", s)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write the IPv4 address %s", s, a.Unmap())
	}
	return a, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not a CIDR: write address/prefix-length, e.g. 10.10.10.0/24 or 2001:db8::/64")
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, errors.New("IPv4-mapped IPv6 CIDRs are not allowed; write the IPv4 CIDR")
	}
	return p, nil
}

// usableBounds returns the first and last address of prefix that may be
// handed out.
func usableBounds(p netip.Prefix) (first, last netip.Addr) {
	lo, hi := prefixBounds(p)
	if reservesNetwork(p) {
		lo = lo.add(1)
	}
	if reservesBroadcast(p) {
		hi = hi.sub(u128{lo: 1})
	}
	is4 := p.Addr().Is4()
	return lo.addr(is4), hi.addr(is4)
}

// reservesNetwork reports whether the first address of p is never handed
// out: the IPv4 network address or the IPv6 subnet-router anycast address.
// Point-to-point (/31, /127) and host (/32, /128) prefixes have none.
func reservesNetwork(p netip.Prefix) bool {
	return p.Addr().BitLen()-p.Bits() >= 2
}

// reservesBroadcast reports whether the last address of p is never handed
// out: the IPv4 broadcast address. IPv6 has no broadcast.
func reservesBroadcast(p netip.Prefix) bool {
	return p.Addr().Is4() && p.Bits() <= 30
}

func (r *Range) parseBound(field, value string, def netip.Addr) (netip.Addr, error) {
	if value == "" {
		return def, nil
	}
	a, err := ParseAddr(value)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %s: %w", ErrInvalidRange, field, err)
	}
	if a.Is4() != r.prefix.Addr().Is4() {
		return netip.Addr{}, fmt.Errorf("%w: %s %s and cidr %s are of different IP families: a pool holds addresses of one family",
			ErrInvalidRange, field, value, r.prefix)
	}
	if !r.prefix.Contains(a) {
		return netip.Addr{}, fmt.Errorf("%w: %s %s is outside cidr %s", ErrInvalidRange, field, value, r.prefix)
	}
	return a, nil
}

// parseGateway checks that a gateway is an address of the CIDR that a
// host may have: not the network, broadcast or subnet-router anycast one.
func (r *Range) parseGateway(value string) (netip.Addr, error) {
	gw, err := r.parseBound("gateway", value, netip.Addr{})
	if err != nil {
		return netip.Addr{}, err
	}
	if first, last := usableBounds(r.prefix); gw.Less(first) || last.Less(gw) {
		return netip.Addr{}, fmt.Errorf("%w: gateway %s is the network, broadcast or subnet-router anycast address of cidr %s: pick a host address",
			ErrInvalidRange, gw, r.prefix)
	}
	return gw, nil
}

// setExcluded turns the exclude list and the reserved addresses into sorted,
// merged spans of offsets clipped to the range, and computes the size.
func (r *Range) setExcluded(exclude []string) error {
	var spans []span
	for _, e := range exclude {
		p, err := parseExclude(e)
		if err != nil {
			return fmt.Errorf("%w: exclude %q: %w", ErrInvalidRange, e, err)
		}
		if p.Addr().Is4() != r.prefix.Addr().Is4() {
			return fmt.Errorf("%w: exclude %s and cidr %s are of different IP families", ErrInvalidRange, e, r.prefix)
		}
		if !r.prefix.Contains(p.Addr()) || p.Bits() < r.prefix.Bits() {
			return fmt.Errorf("%w: exclude %s is outside cidr %s: remove it or fix the address", ErrInvalidRange, e, r.prefix)
		}
		first, last := prefixBounds(p)
		if s, ok := r.clip(first, last); ok {
			spans = append(spans, s)
		}
	}
	pfirst, plast := prefixBounds(r.prefix)
	if reservesNetwork(r.prefix) {
		if s, ok := r.clip(pfirst, pfirst); ok {
			spans = append(spans, s)
		}
	}
	if reservesBroadcast(r.prefix) {
		if s, ok := r.clip(plast, plast); ok {
			spans = append(spans, s)
		}
	}
	r.excluded = mergeSpans(spans)
	// assignable = last + 1 - excluded, computed without overflow.
	var excluded uint64
	for _, s := range r.excluded {
		excluded += s.len()
	}
	switch {
	case len(r.excluded) == 1 && r.excluded[0] == span{lo: 0, hi: r.last}:
		r.size = 0
	case excluded == 0 && r.last == math.MaxUint64:
		r.size = math.MaxUint64 // 2^64 addresses, saturated
	case excluded == 0:
		r.size = r.last + 1
	default:
		r.size = r.last - (excluded - 1)
	}
	return nil
}

func parseExclude(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := parsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("host bits are set: write %s", p.Masked())
	}
	return p, nil
}

func prefixBounds(p netip.Prefix) (first, last u128) {
	first = fromAddr(p.Addr())
	last = first
	hostBits := p.Addr().BitLen() - p.Bits()
	switch {
	case hostBits >= 64:
		last.lo = math.MaxUint64
		last.hi |= (uint64(1) << (hostBits - 64)) - 1
	case hostBits > 0:
		last.lo |= (uint64(1) << hostBits) - 1
	}
	return first, last
}

// clip intersects the address interval [first, last] with the range and
// returns it as offsets.
func (r *Range) clip(first, last u128) (span, bool) {
	end := r.first.add(r.last)
	if last.cmp(r.first) < 0 || first.cmp(end) > 0 {
		return span{}, false
	}
	if first.cmp(r.first) < 0 {
		first = r.first
	}
	if last.cmp(end) > 0 {
		last = end
	}
	return span{lo: first.sub(r.first).lo, hi: last.sub(r.first).lo}, true
}

// mergeSpans sorts spans and merges overlapping and adjacent ones.
func mergeSpans(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && (out[n-1].hi == math.MaxUint64 || s.lo <= out[n-1].hi+1) {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// Prefix returns the pool's CIDR; its length is the prefix length handed out
// with every address.
func (r *Range) Prefix() netip.Prefix { return r.prefix }

// Gateway returns the pool's gateway, or the zero Addr if it has none. It
// is never handed out.
func (r *Range) Gateway() netip.Addr { return r.gateway }

// Start returns the first address of the range (offset 0).
func (r *Range) Start() netip.Addr { return r.start }

// End returns the last address of the range (offset Last()).
func (r *Range) End() netip.Addr { return r.end }

// Last returns the largest offset, end - start.
func (r *Range) Last() uint64 { return r.last }

// Size returns the number of addresses the range can hand out: every offset
// less the excluded and reserved ones. A range of exactly 2^64 assignable
// addresses reports math.MaxUint64.
func (r *Range) Size() uint64 { return r.size }

// Offset returns the offset of ip. It fails with ErrNotInRange when ip is
// outside [start, end] or of the other family. Excluded addresses have
// offsets too; use Assignable to ask whether one may be handed out.
func (r *Range) Offset(ip netip.Addr) (uint64, error) {
	if ip.Is4() != r.start.Is4() || ip.Zone() != "" || ip.Less(r.start) || r.end.Less(ip) {
		return 0, fmt.Errorf("%w: %s is outside %s-%s", ErrNotInRange, ip, r.start, r.end)
	}
	return fromAddr(ip).sub(r.first).lo, nil
}

// IP returns the address at offset, or ErrNotInRange past Last().
func (r *Range) IP(offset uint64) (netip.Addr, error) {
	if offset > r.last {
		return netip.Addr{}, fmt.Errorf("%w: offset %d is past the last offset %d of %s-%s",
			ErrNotInRange, offset, r.last, r.start, r.end)
	}
	return r.first.add(offset).addr(r.start.Is4()), nil
}

// Excluded reports whether offset is excluded or reserved. Offsets past
// Last() are not excluded; they are not in the range at all.
func (r *Range) Excluded(offset uint64) bool {
	_, ok := r.excludedSpan(offset)
	return ok
}

func (r *Range) excludedSpan(offset uint64) (span, bool) {
	i := sort.Search(len(r.excluded), func(i int) bool { return r.excluded[i].hi >= offset })
	if i < len(r.excluded) && r.excluded[i].lo <= offset {
		return r.excluded[i], true
	}
	return span{}, false
}

// Assignable returns ip's offset if the pool may hand ip out, else an error
// wrapping ErrNotInRange or ErrExcluded.
func (r *Range) Assignable(ip netip.Addr) (uint64, error) {
	o, err := r.Offset(ip)
	if err != nil {
		return 0, err
	}
	if r.Excluded(o) {
		return 0, fmt.Errorf("%w: %s is excluded from %s-%s", ErrExcluded, ip, r.start, r.end)
	}
	return o, nil
}

// Contains reports whether the pool may hand ip out: ip is inside the range
// and neither excluded nor reserved.
func (r *Range) Contains(ip netip.Addr) bool {
	_, err := r.Assignable(ip)
	return err == nil
}

// String describes the range canonically, e.g.
// "10.10.10.0/24 10.10.10.1-10.10.10.10 excluding offsets [3 7-10]".
// Two specs that hand out the same addresses at the same offsets have the
// same string.
func (r *Range) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s-%s", r.prefix, r.start, r.end)
	if len(r.excluded) > 0 {
		b.WriteString(" excluding offsets [")
		for i, s := range r.excluded {
			if i > 0 {
				b.WriteByte(' ')
			}
			if s.lo == s.hi {
				fmt.Fprintf(&b, "%d", s.lo)
			} else {
				fmt.Fprintf(&b, "%d-%d", s.lo, s.hi)
			}
		}
		b.WriteByte(']')
	}
	return b.String()
}

// fingerprint identifies the range in snapshots.
func (r *Range) fingerprint() uint64 {
	h := fnv.New64a()
	h.Write([]byte(r.String()))
	return h.Sum64()
}

// Overlaps reports whether two ranges share an address, excluded or not.
func (r *Range) Overlaps(o *Range) bool {
	if r.start.Is4() != o.start.Is4() {
		return false
	}
	return !r.end.Less(o.start) && !o.end.Less(r.start)
}

// nextAssignable returns the smallest offset >= from that is not excluded.
func (r *Range) nextAssignable(from uint64) (uint64, bool) {
	for from <= r.last {
		s, ok := r.excludedSpan(from)
		if !ok {
			return from, true
		}
		if s.hi >= r.last {
			return 0, false
		}
		from = s.hi + 1
	}
	return 0, false
}

// Package poolchange tells what a proposed NodeIPPool does to the addresses
// in use: which holders keep their address (and at which offset), which
// must move to another address, which would find none, and which
// quarantined addresses leave the pool.
//
// Two callers share it, so that they can never disagree: the pool
// controller's admission webhook, which refuses a change of a pool in place
// that would take an address from anyone (docs/protocol.md, "Changing a range in place"), and `kubectl
// nodeippool plan`, which prints the same assessment for any proposed pool,
// changed in place or re-created. It reads nothing itself: callers pass the
// pool as stored, the enactments and the other pools.
package poolchange

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Kind says how an address is held.
type Kind string

const (
	// Recorded means an enactment records the address (status.ippool).
	Recorded Kind = "recorded"
	// InFlight means taken for an enactment that is about to record it.
	InFlight Kind = "in-flight"
	// Quarantined means taken from its holder, kept from everyone until the
	// holder no longer carries it.
	Quarantined Kind = "quarantined"
)

// Holding is one address of the pool in use, and by whom.
type Holding struct {
	IP   netip.Addr `json:"ip"`
	Kind Kind       `json:"kind"`
	// Node, Holder, Policy, Capture and Interface name the holder, as
	// far as they are known (a quarantined address has no capture).
	Node      string     `json:"node,omitempty"`
	Holder    holder.Ref `json:"holder,omitzero"`
	Policy    string     `json:"policy,omitempty"`
	Capture   string     `json:"capture,omitempty"`
	Interface string     `json:"interface,omitempty"`
}

// Describe names the holding for messages: "10.10.10.3 held by node n1
// (policy p, capture addr)".
func (h Holding) Describe() string {
	var who []string
	for _, part := range []struct{ name, value string }{{"policy", h.Policy}, {"capture", h.Capture}, {"interface", h.Interface}} {
		if part.value != "" {
			who = append(who, part.name+" "+part.value)
		}
	}
	verb := "held by"
	switch h.Kind {
	case InFlight:
		verb = "being allocated to"
	case Quarantined:
		verb = "quarantined after"
	}
	name := "node " + cmp.Or(h.Node, "?")
	switch ref := h.Holder; ref.Kind {
	case holder.Claim:
		name = ref.Title()
	case holder.PolicyNode:
		name += " (" + holder.PooledPolicyKind + " " + ref.Name + ")"
	}
	s := fmt.Sprintf("%s %s %s", h.IP, verb, name)
	if len(who) > 0 {
		s += " (" + strings.Join(who, ", ") + ")"
	}
	return s
}

// Holdings collects the addresses of the pool called name in use: what the
// enactments record under that name, and the in-flight and quarantine
// entries of the stored pool (nil when there is none: a pool about to be
// created, whose name enactments may still record from an earlier pool).
func Holdings(name string, stored *ippoolv1.NodeIPPool, records []holder.Record) []Holding {
	var out []Holding
	owners := poolstatus.OwnersOf(name, nil, records)
	for _, ip := range owners.Addrs() {
		for _, o := range owners.Recognized(ip) {
			out = append(out, Holding{IP: ip, Kind: Recorded, Node: o.Node, Holder: o.Holder,
				Policy: o.Policy, Capture: o.Capture, Interface: o.Interface})
		}
	}
	if stored == nil {
		return out
	}
	for _, f := range stored.Status.InFlight {
		if ip, err := netip.ParseAddr(f.IP); err == nil && len(owners.Recognized(ip)) == 0 {
			out = append(out, Holding{IP: ip, Kind: InFlight, Holder: holder.Parse(f.HolderName()), Node: holder.Parse(f.HolderName()).Node})
		}
	}
	for _, q := range stored.Status.Quarantined {
		if ip, err := netip.ParseAddr(q.IP); err == nil && len(owners.Recognized(ip)) == 0 {
			out = append(out, Holding{IP: ip, Kind: Quarantined, Node: q.Node, Holder: holder.Parse(q.HolderName()), Capture: q.Capture})
		}
	}
	slices.SortStableFunc(out, func(a, b Holding) int { return a.IP.Compare(b.IP) })
	return out
}

// Verdict is what a proposed pool does to one holding.
type Verdict string

const (
	// Keep means the address stays the holder's.
	Keep Verdict = "keep"
	// Move means the address leaves the range, or is excluded; the holder's
	// handler allocates another one from the proposed range.
	Move Verdict = "move"
	// Lose is Move, but the proposed range has no free address left for
	// the holder: its enactment would fail with IPPoolExhausted.
	Lose Verdict = "lose"
	// Drop means a quarantined address leaves the range. Nobody gets it from
	// this pool any more; a node may still carry it for a while.
	Drop Verdict = "drop"
)

// Outcome is the verdict on one holding.
type Outcome struct {
	Holding
	Verdict Verdict `json:"verdict"`
	// Offset is the address's offset in the proposed range (Keep only),
	// and OldOffset its offset in the stored one, if there is one.
	Offset    *uint64 `json:"offset,omitempty"`
	OldOffset *uint64 `json:"oldOffset,omitempty"`
	// Why says why the address cannot stay (Move, Lose, Drop).
	Why string `json:"why,omitempty"`
}

// Assessment is what a proposed pool does to the addresses in use.
type Assessment struct {
	Pool string `json:"pool"`
	// From and To describe the stored range (empty for a new pool) and the
	// proposed one, defaults included.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// OffsetsMove is set when the start moves: every offset changes, and
	// the pool controller rebuilds the pool before it serves again.
	OffsetsMove bool      `json:"offsetsMove,omitempty"`
	Outcomes    []Outcome `json:"outcomes"`
	// Size is the number of addresses the proposed range hands out, and
	// Free how many are left once every holder has one.
	Size uint64 `json:"size"`
	Free uint64 `json:"free"`
	// InvalidReservations can never be handed out in the proposed range.
	InvalidReservations []assign.Invalid `json:"invalidReservations,omitempty"`
	// Overlapping names the other pools whose ranges the proposed one
	// overlaps.
	Overlapping []string `json:"overlapping,omitempty"`
}

// Assess tells what proposed does to holdings. stored is the pool as it is
// (nil if there is none); others are every pool, the stored one included
// or not. The error wraps ippool.ErrInvalidRange when the proposed range
// cannot hand out addresses.
func Assess(proposed, stored *ippoolv1.NodeIPPool, holdings []Holding, others []ippoolv1.NodeIPPool) (*Assessment, error) {
	to, err := poolstatus.Range(proposed)
	if err != nil {
		return nil, fmt.Errorf("NodeIPPool %q: %w", proposed.Name, err)
	}
	a := &Assessment{Pool: proposed.Name, To: describeRange(to), Size: to.Size()}
	var from *ippool.Range
	if stored != nil {
		if from, err = poolstatus.Range(stored); err == nil {
			a.From, a.OffsetsMove = describeRange(from), from.Start() != to.Start()
		}
	}
	a.judge(from, to, holdings)
	_, a.InvalidReservations = assign.Reservations(proposed, to)
	a.Overlapping = overlapping(proposed.Name, to, others)
	return a, nil
}

// judge gives each holding its verdict in the proposed range to (from is
// the stored one, or nil), and counts what stays free: holders that must
// move take free addresses in order, and those past the last one lose.
func (a *Assessment) judge(from, to *ippool.Range, holdings []Holding) {
	var kept uint64
	var movers []int
	for _, h := range holdings {
		o := Outcome{Holding: h, Verdict: Keep}
		if from != nil {
			if off, err := from.Offset(h.IP); err == nil {
				o.OldOffset = &off
			}
		}
		switch off, err := to.Assignable(h.IP); {
		case err == nil:
			o.Offset = &off
			kept++
		case h.Kind == Quarantined:
			o.Verdict, o.Why = Drop, why(to, h.IP)
		default:
			o.Verdict, o.Why = Move, why(to, h.IP)
			movers = append(movers, len(a.Outcomes))
		}
		a.Outcomes = append(a.Outcomes, o)
	}
	a.Free = sub(a.Size, kept)
	for _, i := range movers {
		if a.Free == 0 {
			a.Outcomes[i].Verdict = Lose
			a.Outcomes[i].Why += "; the proposed range has no free address left for it"
			continue
		}
		a.Free--
	}
}

// overlapping describes the pools other than name whose ranges overlap rng.
func overlapping(name string, rng *ippool.Range, pools []ippoolv1.NodeIPPool) []string {
	var out []string
	for i := range pools {
		o := &pools[i]
		if o.Name == name {
			continue
		}
		if r, err := poolstatus.Range(o); err == nil && r.Overlaps(rng) {
			out = append(out, fmt.Sprintf("%s (%s)", o.Name, describeRange(r)))
		}
	}
	slices.Sort(out)
	return out
}

// why says why the range does not hand ip out.
func why(rng *ippool.Range, ip netip.Addr) string {
	if _, err := rng.Offset(ip); err != nil {
		return fmt.Sprintf("outside the proposed range %s-%s", rng.Start(), rng.End())
	}
	if ip == rng.Gateway() {
		return "the gateway of the proposed pool"
	}
	return "excluded from the proposed range"
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func describeRange(r *ippool.Range) string {
	return fmt.Sprintf("%s-%s", r.Start(), r.End())
}

// Count returns how many outcomes have verdict v.
func (a *Assessment) Count(v Verdict) int {
	n := 0
	for _, o := range a.Outcomes {
		if o.Verdict == v {
			n++
		}
	}
	return n
}

// Taken lists the holders a change in place would take an address from:
// recorded and in-flight addresses the proposed range does not hand out.
func (a *Assessment) Taken() []Outcome {
	var out []Outcome
	for _, o := range a.Outcomes {
		if o.Verdict == Move || o.Verdict == Lose {
			out = append(out, o)
		}
	}
	return out
}

// Refusals says why the proposed pool may not be admitted, each with what
// to do; none when it may. A reservation that can never be handed out is
// always refused. Changed in place (inPlace), a pool also never takes an
// address from a holder and never grows into another pool; a new pool
// (re-created to renumber) may do both: its holders move, and the pool
// controller refuses the newer of two overlapping pools.
func (a *Assessment) Refusals(inPlace bool) field.ErrorList {
	var errs field.ErrorList
	reservations := field.NewPath("spec", "reservations")
	for _, in := range a.InvalidReservations {
		errs = append(errs, field.Invalid(reservations.Key(in.IP).Child("ip"), in.IP,
			fmt.Sprintf("cannot be handed out: %s; fix or remove it", in.Why)))
	}
	if !inPlace {
		return errs
	}
	rng := field.NewPath("spec", "range")
	if taken := a.Taken(); len(taken) > 0 {
		descs := make([]string, 0, len(taken))
		for _, o := range taken {
			descs = append(descs, o.Describe()+" would be "+o.Why)
		}
		errs = append(errs, field.Forbidden(rng, fmt.Sprintf(
			"the change takes %d address(es) in use from their holders: %s; keep these addresses in the range, "+
				"or move their holders first (kubectl annotate nnce <enactment> %s=%s), or re-create the pool to renumber them",
			len(taken), listed(descs, 10), ippoolv1.ResetIPPoolAnnotation, a.Pool)))
	}
	if len(a.Overlapping) > 0 {
		errs = append(errs, field.Forbidden(rng, fmt.Sprintf(
			"the range %s would overlap NodeIPPool %s: pools must not share addresses; pick a range outside them",
			a.To, strings.Join(a.Overlapping, ", "))))
	}
	return errs
}

// Summary describes the assessment in a few lines, for admission warnings
// and the plan's footer.
func (a *Assessment) Summary() []string {
	var out []string
	if a.From != "" && a.From != a.To {
		line := fmt.Sprintf("NodeIPPool %s: the range changes from %s to %s", a.Pool, a.From, a.To)
		if a.OffsetsMove {
			line += "; the start moves, so every offset moves and the pool controller rebuilds the pool (Available=Unknown, ReconcilingPool) before it hands out addresses again"
		}
		out = append(out, line)
	}
	out = append(out, fmt.Sprintf("NodeIPPool %s: %d holder(s) keep their address, %d move to another, %d find none; %d of %d addresses stay free",
		a.Pool, a.Count(Keep), a.Count(Move), a.Count(Lose), a.Free, a.Size))
	var dropped []string
	for _, o := range a.Outcomes {
		if o.Verdict == Drop {
			dropped = append(dropped, o.Describe())
		}
	}
	if len(dropped) > 0 {
		out = append(out, fmt.Sprintf("NodeIPPool %s: quarantined address(es) leave the range and are handed out by no pool: %s", a.Pool, listed(dropped, 10)))
	}
	return out
}

// listed joins at most n items, saying how many more there are.
func listed(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:n], "; "), len(items)-n)
}

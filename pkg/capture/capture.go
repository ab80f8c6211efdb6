package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/nmstate/nmpolicy/nmpolicy"
	nmpolicytypes "github.com/nmstate/nmpolicy/nmpolicy/types"
	"sigs.k8s.io/yaml"
)

// ErrMalformed is wrapped by every error about an ippool expression that is
// not of the form ippool.<pool>.allocate.
var ErrMalformed = errors.New("malformed ippool capture")

// Prefix starts every ippool expression.
const Prefix = "ippool."

// UsesPools reports whether any of a policy's captures is an ippool
// expression, well-formed or not.
func UsesPools(captures map[string]string) bool {
	for _, expr := range captures {
		if strings.HasPrefix(strings.TrimSpace(expr), Prefix) {
			return true
		}
	}
	return false
}

// ippoolExpression is "ippool.<pool>.allocate" with <pool> a DNS-1123 label,
// the only names a NodeIPPool may have.
var ippoolExpression = regexp.MustCompile(`^ippool\.([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\.allocate$`)

// Ref is a capture that allocates from a pool.
type Ref struct {
	// Capture is the capture's name in the policy.
	Capture string
	// Pool is the NodeIPPool's name.
	Pool string
}

// Captures are a policy's captures, split.
type Captures struct {
	// Refs are the ippool captures, sorted by capture name.
	Refs []Ref
	// All are every capture expression of the policy, ippool ones included,
	// as nmpolicy wants them.
	All map[string]string
}

// Parse splits a policy's captures into ippool references and ordinary
// expressions. An expression that starts with "ippool." but is not exactly
// "ippool.<pool>.allocate" is an error wrapping ErrMalformed; all such
// errors are joined so that a user sees every bad capture at once.
func Parse(captures map[string]string) (Captures, error) {
	c := Captures{All: maps.Clone(captures)}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(captures)) {
		expr := strings.TrimSpace(captures[name])
		if !strings.HasPrefix(expr, Prefix) {
			continue
		}
		m := ippoolExpression.FindStringSubmatch(expr)
		if m == nil {
			errs = append(errs, fmt.Errorf("%w: capture %q is %q; write ippool.<pool>.allocate, where <pool> is a NodeIPPool name",
				ErrMalformed, name, captures[name]))
			continue
		}
		c.Refs = append(c.Refs, Ref{Capture: name, Pool: m[1]})
	}
	return c, errors.Join(errs...)
}

// Pools returns the distinct pools the captures draw from, sorted.
func (c Captures) Pools() []string {
	var pools []string
	for _, r := range c.Refs {
		pools = append(pools, r.Pool)
	}
	slices.Sort(pools)
	return slices.Compact(pools)
}

// RefsOf returns the captures that draw from pool, in capture-name order.
func (c Captures) RefsOf(pool string) []Ref {
	var refs []Ref
	for _, r := range c.Refs {
		if r.Pool == pool {
			refs = append(refs, r)
		}
	}
	return refs
}

// Address is what an ippool capture resolves to: the address and its
// prefix length, with the pool's gateway and DNS settings when it has them.
type Address struct {
	IP           netip.Addr
	PrefixLength int
	// Gateway is the pool's gateway; the zero Addr if it has none.
	Gateway netip.Addr
	// DNSServers and DNSSearch are the pool's DNS settings.
	DNSServers []netip.Addr
	DNSSearch  []string
}

func (a Address) String() string { return fmt.Sprintf("%s/%d", a.IP, a.PrefixLength) }

// addressState is the captured state of an ippool capture: what a desired
// state reads as {{ capture.<name>.ip }}, prefix-length, gateway,
// dns-servers and dns-search.
type addressState struct {
	IP           string   `json:"ip"`
	PrefixLength int      `json:"prefix-length"`
	Gateway      string   `json:"gateway,omitempty"`
	DNSServers   []string `json:"dns-servers,omitempty"`
	DNSSearch    []string `json:"dns-search,omitempty"`
}

// State returns the captured state of an allocated address, as nmpolicy and
// the enactment's status.capturedStates hold it.
func (a Address) State() []byte {
	s := addressState{IP: a.IP.String(), PrefixLength: a.PrefixLength, DNSSearch: a.DNSSearch}
	if a.Gateway.IsValid() {
		s.Gateway = a.Gateway.String()
	}
	for _, ip := range a.DNSServers {
		s.DNSServers = append(s.DNSServers, ip.String())
	}
	b, _ := json.Marshal(s) // cannot fail
	return b
}

// ParseState reads an address back from a captured state written by State
// (as JSON, or as the YAML an enactment stores). ok is false if the state is not
// an address.
func ParseState(state []byte) (Address, bool) {
	var s addressState
	if err := yaml.Unmarshal(state, &s); err != nil {
		return Address{}, false
	}
	ip, err := netip.ParseAddr(s.IP)
	if err != nil || s.PrefixLength < 0 || s.PrefixLength > ip.BitLen() {
		return Address{}, false
	}
	a := Address{IP: ip, PrefixLength: s.PrefixLength, DNSSearch: s.DNSSearch}
	if s.Gateway != "" {
		if a.Gateway, err = netip.ParseAddr(s.Gateway); err != nil {
			return Address{}, false
		}
	}
	for _, d := range s.DNSServers {
		server, err := netip.ParseAddr(d)
		if err != nil {
			return Address{}, false
		}
		a.DNSServers = append(a.DNSServers, server)
	}
	return a, true
}

// Input is what Render needs.
type Input struct {
	// DesiredState is the policy's desired state template (YAML).
	DesiredState []byte
	// Captures are the policy's captures.
	Captures Captures
	// Allocated holds the address of every ippool capture, by capture name.
	Allocated map[string]Address
	// CurrentState is the node's current network state (YAML or JSON), for
	// the ordinary captures.
	CurrentState []byte
}

// Output is a rendered policy.
type Output struct {
	// DesiredState is the desired state with every capture reference
	// replaced (YAML).
	DesiredState []byte
	// CapturedStates holds the state of every capture that was resolved, by
	// capture name (YAML).
	CapturedStates map[string][]byte
}

// Render resolves the captures and expands the desired state. Every ippool
// capture must have an address in in.Allocated.
func Render(in Input) (Output, error) {
	cache := nmpolicytypes.CachedState{Capture: map[string]nmpolicytypes.CaptureState{}}
	var missing []error
	for _, r := range in.Captures.Refs {
		addr, ok := in.Allocated[r.Capture]
		if !ok {
			return Output{}, fmt.Errorf("capture %q has no address from pool %q", r.Capture, r.Pool)
		}
		cache.Capture[r.Capture] = nmpolicytypes.CaptureState{State: addr.State()}
		// nmpolicy would say "step not found" of a field the address
		// lacks: say which pool setting provides it.
		missing = append(missing, Missing(Needs(in.DesiredState, []Ref{r}), r.Pool, addr))
	}
	if err := errors.Join(missing...); err != nil {
		return Output{}, err
	}
	// nmpolicy deletes cached captures from the expression map it is given:
	// give it a copy, never the policy's own map.
	generated, err := nmpolicy.GenerateState(
		nmpolicytypes.PolicySpec{Capture: maps.Clone(in.Captures.All), DesiredState: in.DesiredState},
		in.CurrentState, cache)
	if err != nil {
		return Output{}, fmt.Errorf("render the desired state: %w", err)
	}
	out := Output{DesiredState: generated.DesiredState, CapturedStates: map[string][]byte{}}
	for name, s := range generated.Cache.Capture {
		out.CapturedStates[name] = s.State
	}
	return out, nil
}

// ParsePolicy parses a policy's captures (Parse) and, when some draw from
// a pool, checks its desired state template (CheckTemplate): a policy that
// can never render must not hold a pool's addresses. Plain policies are
// left to nmpolicy, as kubernetes-nmstate leaves them.
func ParsePolicy(captures map[string]string, desiredState []byte) (Captures, error) {
	c, err := Parse(captures)
	if err != nil || len(c.Refs) == 0 {
		return c, err
	}
	return c, c.CheckTemplate(desiredState)
}

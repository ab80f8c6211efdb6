package envtest

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// NICSampler reads the networks of simulated nodes again and again, and
// keeps every sample in which one address was on two of them: one address,
// one NIC.
type NICSampler struct {
	mu         sync.Mutex
	nodes      []*Node
	duplicates []string
	samples    int
	// keep maps a node to an address it must carry in every sample, and
	// some to a prefix of which it must carry at least one address;
	// without lists the samples in which one did not.
	keep    map[string]netip.Addr
	some    map[string]netip.Prefix
	without []string
}

// SampleNICs samples the networks of nodes, and of those Watch adds,
// every 50ms until the test ends.
func SampleNICs(t testing.TB, nodes ...*Node) *NICSampler {
	s := &NICSampler{nodes: nodes}
	Every(t, 50*time.Millisecond, s.sample)
	return s
}

// Watch adds nodes to those sampled.
func (s *NICSampler) Watch(nodes ...*Node) {
	s.mu.Lock()
	s.nodes = append(s.nodes, nodes...)
	s.mu.Unlock()
}

// MustCarryIn makes every later sample check that the node carries some
// address of prefix.
func (s *NICSampler) MustCarryIn(node string, prefix netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.some == nil {
		s.some = map[string]netip.Prefix{}
	}
	s.some[node] = prefix
}

// MustKeep makes every later sample check that the node carries ip.
func (s *NICSampler) MustKeep(node string, ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keep == nil {
		s.keep = map[string]netip.Addr{}
	}
	s.keep[node] = ip
}

// WithoutAddress returns the samples, so far, in which a node did not
// carry what MustKeep or MustCarryIn asked of it, after at least one more
// sample.
func (s *NICSampler) WithoutAddress() []string {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.without)
}

// OnTwoNICs returns the duplicates seen so far, after at least one more
// sample.
func (s *NICSampler) OnTwoNICs() []string {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.duplicates)
}

func (s *NICSampler) sample() {
	s.mu.Lock()
	nodes := slices.Clone(s.nodes)
	s.mu.Unlock()
	holders := map[netip.Addr][]string{}
	shown := map[string]bool{}
	for _, nd := range nodes {
		raw, err := nd.Network.Runner.Show(context.Background())
		if err != nil {
			continue
		}
		shown[nd.Name] = true
		for ip := range netstate.Carriers(raw) {
			holders[ip] = append(holders[ip], nd.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for node, ip := range s.keep {
		if shown[node] && !slices.Contains(holders[ip], node) {
			s.without = append(s.without, fmt.Sprintf("sample %d: node %s without %s", s.samples, node, ip))
		}
	}
	for node, prefix := range s.some {
		if shown[node] && !slices.ContainsFunc(slices.Collect(maps.Keys(holders)), func(ip netip.Addr) bool {
			return prefix.Contains(ip) && slices.Contains(holders[ip], node)
		}) {
			s.without = append(s.without, fmt.Sprintf("sample %d: node %s without an address of %s", s.samples, node, prefix))
		}
	}
	for ip, on := range holders {
		if len(on) > 1 {
			sort.Strings(on)
			s.duplicates = append(s.duplicates, fmt.Sprintf("%s on %v", ip, on))
		}
	}
}

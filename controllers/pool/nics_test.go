package pool_test

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

	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// nicSampler reads the networks of nodes again and again, and keeps every
// sample in which one address was on two of them: one address, one NIC.
type nicSampler struct {
	mu         sync.Mutex
	nodes      []*envtest.Node
	duplicates []string
	samples    int
	// keep maps a node to an address it must carry in every sample, and
	// some to a prefix of which it must carry at least one address;
	// without lists the samples in which one did not.
	keep    map[string]netip.Addr
	some    map[string]netip.Prefix
	without []string
}

// mustCarryIn makes every later sample check that the node carries some
// address of prefix.
func (s *nicSampler) mustCarryIn(node string, prefix netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.some == nil {
		s.some = map[string]netip.Prefix{}
	}
	s.some[node] = prefix
}

// mustKeep makes every later sample check that the node carries ip.
func (s *nicSampler) mustKeep(node string, ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keep == nil {
		s.keep = map[string]netip.Addr{}
	}
	s.keep[node] = ip
}

// withoutAddress returns the samples, so far, in which a node did not carry
// the address it must keep, after at least one more sample.
func (s *nicSampler) withoutAddress() []string {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.without)
}

// sampleNICs samples the networks of nodes, and of those watch adds, until
// the test ends.
func sampleNICs(t *testing.T, nodes ...*envtest.Node) *nicSampler {
	s := &nicSampler{nodes: nodes}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			s.sample()
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
	return s
}

func (s *nicSampler) watch(nodes ...*envtest.Node) {
	s.mu.Lock()
	s.nodes = append(s.nodes, nodes...)
	s.mu.Unlock()
}

func (s *nicSampler) sample() {
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
		for ip := range nmstatectl.Carriers(raw) {
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

// onTwoNICs returns the duplicates seen so far, after at least one more
// sample.
func (s *nicSampler) onTwoNICs() []string {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.duplicates)
}

// carried returns the addresses a node's network carries on eth1.
func carried(nd *envtest.Node) func() []string {
	return func() []string { return nd.ConfiguredAll("eth1") }
}

package chaos

import (
	"maps"
	"slices"
	"sync"
)

// nodeSet is a set of node names safe for concurrent use.
type nodeSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (s *nodeSet) add(node string) { s.mu.Lock(); defer s.mu.Unlock(); s.m[node] = true }

func (s *nodeSet) remove(node string) { s.mu.Lock(); defer s.mu.Unlock(); delete(s.m, node) }

func (s *nodeSet) has(node string) bool { s.mu.Lock(); defer s.mu.Unlock(); return s.m[node] }

func (s *nodeSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.m))
}

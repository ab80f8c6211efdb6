package chaos

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestOnTwoNICs: the sampler's verdict, on networks made up here: an
// address on two existing nodes is reported, one on a removed node is not.
func TestOnTwoNICs(t *testing.T) {
	nets := map[string][]string{
		"node01": {"10.90.0.1", "fd00:90::1"},
		"node02": {"10.90.0.2", "fd00:90::1"},
		"node03": {"10.90.0.2"},
		"gone":   {"10.90.0.1"},
	}
	got := onTwoNICs(nets, []string{"node01", "node02", "node03"})
	want := []string{"10.90.0.2 on [node02 node03]", "fd00:90::1 on [node01 node02]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestClaimedAndCarried: an address one IPAddress held before and after
// the networks were read, and a present node carried, is reported; one
// whose IPAddress changed or went meanwhile, or that only a removed node
// carries, is not; two IPAddresses of one address are.
func TestClaimedAndCarried(t *testing.T) {
	nets := map[string][]string{"node01": {"10.90.0.1", "10.90.0.2", "10.90.0.3"}, "gone": {"10.90.0.4"}}
	before := map[string]string{
		"10.90.0.1": "ns/a@1", "10.90.0.2": "ns/b@2", "10.90.0.3": "ns/c@3", "10.90.0.4": "ns/d@4",
		"10.90.0.5": "ns/e@5", "10.90.0.5#2": "ns/f@6",
	}
	after := map[string]string{
		"10.90.0.1": "ns/a@1", "10.90.0.2": "ns/b@7", "10.90.0.4": "ns/d@4",
		"10.90.0.5": "ns/e@5", "10.90.0.5#2": "ns/f@6",
	}
	got := claimedAndCarried(before, after, nets, []string{"node01"})
	want := []string{"10.90.0.1 held by IPAddress ns/a@1 and on node node01", "10.90.0.5 held by two IPAddresses (ns/e@5 and ns/f@6)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// sampler looks at every node's network, again and again, for an address
// on two NICs.
type sampler struct {
	mu         sync.Mutex
	duplicates []string
	samples    int
	done       chan struct{}
	wg         sync.WaitGroup
}

func (c *cluster) sample() *sampler {
	s := &sampler{done: make(chan struct{})}
	s.wg.Go(func() {
		for {
			select {
			case <-s.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			// A node counts only if it exists before and after its network
			// is read: a removed node's network is gone with it. A node
			// whose Node was deleted while its handler runs counts: its
			// machine is still there.
			// A claim's address counts only if the same IPAddress holds it
			// before and after the networks are read.
			before := c.claimAddresses()
			nets := c.networks(c.machines())
			after := c.claimAddresses()
			found := onTwoNICs(nets, c.machines())
			found = append(found, claimedAndCarried(before, after, nets, c.machines())...)
			s.mu.Lock()
			s.samples++
			for _, d := range found {
				s.duplicates = append(s.duplicates, time.Now().Format(time.StampMilli)+" "+d)
			}
			s.mu.Unlock()
		}
	})
	return s
}

// onTwoNICs lists the addresses that two nodes carry, counting only nodes
// that still exist: "10.90.0.4 on [node01 node07]".
func onTwoNICs(nets map[string][]string, present []string) []string {
	holders := map[string][]string{}
	for node, ips := range nets {
		if !slices.Contains(present, node) {
			continue
		}
		for _, ip := range ips {
			holders[ip] = append(holders[ip], node)
		}
	}
	var out []string
	for ip, on := range holders {
		if len(on) > 1 {
			sort.Strings(on)
			out = append(out, fmt.Sprintf("%s on %v", ip, on))
		}
	}
	sort.Strings(out)
	return out
}

func (s *sampler) stop() ([]string, int) {
	close(s.done)
	s.wg.Wait()
	return s.duplicates, s.samples
}

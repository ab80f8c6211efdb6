package carriers

import (
	"maps"
	"net/netip"
	"sync"
	"time"
)

// departures remembers the nodes whose Nodes are gone, from when, and
// the addresses their states showed: until the Node comes back, or, once
// the hold is over, its state is collected. Safe for concurrent use.
type departures struct {
	mu     sync.Mutex
	byNode map[string]*departure
	// collected holds what the states collected while their Nodes
	// existed (as the watch had them) showed: the watch of the states may
	// see one collected before the watch of the Nodes sees its Node go.
	collected map[string]departure
}

// departure is when a node's Node went, and what its state showed.
type departure struct {
	at    time.Time
	shows map[netip.Addr]bool
}

// entry returns the departure of node, a new one from at if there is none.
// Call it with mu held.
func (d *departures) entry(node string, at time.Time) *departure {
	if d.byNode == nil {
		d.byNode = map[string]*departure{}
	}
	e := d.byNode[node]
	if e == nil {
		e = &departure{at: at, shows: map[netip.Addr]bool{}}
		d.byNode[node] = e
	}
	return e
}

// deleted remembers that node's Node was deleted at, its state showing
// shows: the hold counts from its last deletion
// (none: what its state showed when it was collected just before).
func (d *departures) deleted(node string, at time.Time, shows []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entry(node, at)
	e.at = at
	for _, ip := range shows {
		e.shows[ip] = true
	}
	if c, ok := d.collected[node]; ok && shows == nil {
		maps.Copy(e.shows, c.shows)
	}
	delete(d.collected, node)
}

// collectedLive remembers what node's state showed when it was collected
// at, its Node still there as far as the watch knew.
func (d *departures) collectedLive(node string, at time.Time, shows []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.collected == nil {
		d.collected = map[string]departure{}
	}
	c := departure{at: at, shows: map[netip.Addr]bool{}}
	for _, ip := range shows {
		c.shows[ip] = true
	}
	d.collected[node] = c
}

// found remembers that node's state shows shows while its Node is gone:
// from at, if its deletion is not known (it went before the watch
// started, or the watch has not seen it yet).
func (d *departures) found(node string, at time.Time, shows []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entry(node, at)
	for _, ip := range shows {
		e.shows[ip] = true
	}
}

// back forgets node: its Node exists.
func (d *departures) back(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byNode, node)
}

// held returns, by address, the nodes whose Nodes went less than hold
// before now, with what their states showed. A node whose hold is over
// is remembered, without its addresses, while stateExists reports its
// state still there (found again, it must not be held afresh), and
// forgotten once it is collected.
func (d *departures) held(now time.Time, hold time.Duration, stateExists func(node string) bool) map[netip.Addr][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	maps.DeleteFunc(d.collected, func(_ string, c departure) bool { return now.Sub(c.at) >= hold })
	out := map[netip.Addr][]string{}
	for node, e := range d.byNode {
		if now.Sub(e.at) < hold {
			for ip := range e.shows {
				out[ip] = append(out[ip], node)
			}
			continue
		}
		clear(e.shows)
		if !stateExists(node) {
			delete(d.byNode, node)
		}
	}
	return out
}

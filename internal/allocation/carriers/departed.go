package carriers

import (
	"net/netip"
	"sync"
	"time"
)

// departures remembers, by node, what the states of nodes whose Nodes or
// states went showed, and from when: held for the hold from the Node's
// deletion, or from the state's if that came first (the garbage
// collector takes a state with its Node, and the watches of the two may
// see them go in either order). Safe for concurrent use.
type departures struct {
	mu     sync.Mutex
	byNode map[string]*departure
}

// departure is when a node's Node (or state) went, and what its state
// showed.
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
// shows: the hold counts from its last deletion, with what its state
// showed when it was collected just before, if it was.
func (d *departures) deleted(node string, at time.Time, shows []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entry(node, at)
	e.at = at
	for _, ip := range shows {
		e.shows[ip] = true
	}
}

// found remembers that node's state showed shows and is gone, or shows
// them while its Node is gone: held from at, unless the node is held
// already (or was, and its state stays: it is not held afresh).
func (d *departures) found(node string, at time.Time, shows []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entry(node, at)
	for _, ip := range shows {
		e.shows[ip] = true
	}
}

// collected remembers that node's state, showing shows, was collected at:
// held from then, as found, and afresh if the node's hold is over (the
// state of a Node registered again, deleted again before its watch saw
// it).
func (d *departures) collected(node string, at time.Time, hold time.Duration, shows []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entry(node, at)
	if at.Sub(e.at) >= hold {
		e.at = at
		clear(e.shows)
	}
	for _, ip := range shows {
		e.shows[ip] = true
	}
}

// back forgets node, its Node there again, once its hold is over: within
// it, its machine (the same, registered again, or one being replaced) may
// still carry what its state showed, and the new Node's state is not
// published yet.
func (d *departures) back(node string, now time.Time, hold time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.byNode[node]; ok && now.Sub(e.at) >= hold {
		delete(d.byNode, node)
	}
}

// held returns, by address, the nodes whose Nodes (or states) went less
// than hold before now, with what their states showed. A node whose hold
// is over is remembered, without its addresses, while stateExists reports
// its state still there (found again, it is not held afresh), and
// forgotten once it is collected. stateExists must not block.
func (d *departures) held(now time.Time, hold time.Duration, stateExists func(node string) bool) map[netip.Addr][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
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

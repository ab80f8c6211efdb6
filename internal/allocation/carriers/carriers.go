// Package carriers tells which nodes' networks carry each address, from a
// watch of the NodeNetworkStates reduced to what they carry (and of the
// Nodes, as names, for when one was deleted): what a new
// address avoids, for every kind that hands addresses out (the pool
// controller's serve, companion mode's policies, Cluster API claims).
// Adoption, which gives a node the address it carries, reads that node's
// state from the API server instead (lifecycle.ReadCarrying).
package carriers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/periods"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// Carriers tells which nodes' networks carry each address, as their
// NodeNetworkStates show it: from a watch of the states of its own, each reduced as it arrives to the addresses it carries, once
// that watch has synced; until then (or without a watch) from a list of
// the states from the API server's watch cache. The watch keeps nothing
// else of a state: it is no source of whole states (whether one is
// published, which addresses were learned by DHCP).
type Carriers struct {
	cache  cache.Cache
	synced func() bool
	api    client.Reader

	// seen counts the watch's events; Of keeps its answer from the
	// watch (memo) until the count moves: the asks of a burst read
	// what the nodes carry once, not each one from every state.
	seen   atomic.Uint64
	mu     sync.Mutex
	memo   map[netip.Addr][]string
	memoAt uint64

	// Hold is how long what the state of a deleted Node shows still
	// counts as carried, from when its Node was deleted
	// (periods.DefaultDepartureHold by default; the pool controller sets
	// its departure hold; 0: not at all).
	Hold time.Duration
	// departed holds, by node, when its Node was seen deleted (by the
	// watch; or, deleted before the watch started, when a read first
	// found its state without it), until the Node comes back or its
	// state is collected.
	departedMu sync.Mutex
	departed   map[string]time.Time
}

// Watch returns Carriers that watches the states with a cache of its
// own, run by mgr on the leader only (the controllers that hand addresses
// out run there); api reads the states until the watch has synced. One
// Carriers serves every controller of a process.
func Watch(mgr ctrl.Manager, api client.Reader) (*Carriers, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&nncev1beta1.NodeNetworkState{}: {Transform: carriedOnly},
			nodemeta.Object(""):             {Transform: nameOnly},
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, fmt.Errorf("make the cache of the addresses nodes carry: %w", err)
	}
	informer, err := c.GetInformer(context.Background(), &nncev1beta1.NodeNetworkState{})
	if err != nil {
		return nil, fmt.Errorf("watch NodeNetworkStates, for the addresses nodes carry: %w", err)
	}
	if err := mgr.Add(onLeader{c}); err != nil {
		return nil, err
	}
	carriers := &Carriers{cache: c, synced: informer.HasSynced, api: api, Hold: periods.DefaultDepartureHold}
	// The handler runs once the watch's store has the change: an answer
	// read after a count includes every change counted.
	seen := func() { carriers.seen.Add(1) }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { seen() },
		UpdateFunc: func(any, any) { seen() },
		DeleteFunc: func(o any) { seen(); carriers.returned(nameOf(o)) }, // collected: nothing left to hold
	}); err != nil {
		return nil, fmt.Errorf("watch NodeNetworkStates, for the addresses nodes carry: %w", err)
	}
	// The Nodes, as names only, for when each was deleted: what its state
	// shows is held from then.
	nodes, err := c.GetInformer(context.Background(), nodemeta.Object(""))
	if err != nil {
		return nil, fmt.Errorf("watch Nodes, for when a node whose state shows addresses was deleted: %w", err)
	}
	if _, err := nodes.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { carriers.returned(nameOf(o)) },
		DeleteFunc: func(o any) { carriers.departedAt(nameOf(o), time.Now()) },
	}); err != nil {
		return nil, fmt.Errorf("watch Nodes, for when a node whose state shows addresses was deleted: %w", err)
	}
	return carriers, nil
}

// nameOf returns the name of a watched object, or of the one a deletion
// missed by the watch stood for.
func nameOf(o any) string {
	if gone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = gone.Obj
	}
	if m, ok := o.(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}

// nameOnly reduces a Node's metadata to its name.
func nameOnly(o any) (any, error) {
	n, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil
	}
	out := nodemeta.Object(n.Name)
	out.UID, out.ResourceVersion = n.UID, n.ResourceVersion
	return out, nil
}

// departedAt returns when node's Node was deleted, as remembered; at, and
// remembers it, if that is not known.
func (c *Carriers) departedAt(node string, at time.Time) time.Time {
	c.departedMu.Lock()
	defer c.departedMu.Unlock()
	if known, ok := c.departed[node]; ok {
		return known
	}
	if c.departed == nil {
		c.departed = map[string]time.Time{}
	}
	c.departed[node] = at
	return at
}

// returned forgets that node's Node was deleted: it is back, or its state
// is collected.
func (c *Carriers) returned(node string) {
	c.departedMu.Lock()
	defer c.departedMu.Unlock()
	delete(c.departed, node)
}

// Of returns, by address, the nodes whose states show it (assign.CarriersOf).
// It never waits for the watch: a watch that cannot sync (a state that
// cannot be read, a missing permission) leaves the reads to the API
// server, whose errors are the caller's. Either source is behind etcd:
// by milliseconds usually, by seconds under load or after a broken
// watch. What a node carries is known only from the state it last
// published, so no read sees an address it takes after; a new address
// avoids what was seen, and adoption, which gives a node the
// address it carries, reads its states consistently instead
// (lifecycle.ReadCarrying).
//
// The answer is shared with other callers until a state changes: read it,
// change nothing in it.
func (c *Carriers) Of(ctx context.Context) (map[netip.Addr][]string, error) {
	if c.Synced() {
		if carriers, ok := c.fromWatch(ctx); ok {
			return carriers, nil
		}
	}
	var list nncev1beta1.NodeNetworkStateList
	if err := c.api.List(ctx, &list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
		return nil, fmt.Errorf("list NodeNetworkStates, for the addresses nodes' networks carry: %w", err)
	}
	return assign.CarriersOf(list.Items), nil
}

// fromWatch returns Of's answer from the watch: the one kept, unless a
// state changed since. It reports false if the watch's store cannot be
// listed.
func (c *Carriers) fromWatch(ctx context.Context) (map[netip.Addr][]string, bool) {
	at := c.seen.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.memo != nil && c.memoAt == at {
		return c.memo, true
	}
	var list nncev1beta1.NodeNetworkStateList
	if err := c.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil, false
	}
	c.memo, c.memoAt = assign.CarriersOf(list.Items), at
	return c.memo, true
}

// Ensure returns c, or, when c is nil, Carriers that watch the states
// (Watch): a controller set up alone gets its own watch, one given the
// process's shares it.
func Ensure(c *Carriers, mgr ctrl.Manager, api client.Reader) (*Carriers, error) {
	if c != nil {
		return c, nil
	}
	return Watch(mgr, api)
}

// FromAPI returns Carriers without a watch: every Of lists the states
// from the API server's watch cache.
func FromAPI(api client.Reader) *Carriers { return &Carriers{api: api} }

// Synced reports whether the watch has listed every state once: until
// then Of reads from the API server.
func (c *Carriers) Synced() bool { return c.cache != nil && c.synced() }

// onLeader runs a cache on the leader only.
type onLeader struct{ cache.Cache }

// NeedLeaderElection reports that the cache runs on the leader only.
func (onLeader) NeedLeaderElection() bool { return true }

// carriedOnly reduces a NodeNetworkState to its name and a state that
// carries what it carries (netstate.CarriedState), nothing else.
func carriedOnly(o any) (any, error) {
	nns, ok := o.(*nncev1beta1.NodeNetworkState)
	if !ok {
		return o, nil
	}
	out := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{
		Name: nns.Name, UID: nns.UID, ResourceVersion: nns.ResourceVersion}}
	out.Status.CurrentState.Raw = netstate.CarriedState(netstate.Carriers(nns.Status.CurrentState.Raw))
	return out, nil
}

// Complete completes what lifecycle.ReadCarrying read of the nodes that
// ask with what every node carries, for a new address to avoid: from the
// watch (Of), unless ReadCarrying listed the states itself (one of the
// asking nodes carries an address of the range, which adoption decides
// on a consistent read); then it keeps the carriers that are live Nodes,
// and departed ones for the hold (Within). A nil Carriers lists the
// states from the API server, as lifecycle.WithCarriers does, and holds
// nothing for departed Nodes.
func (c *Carriers) Complete(ctx context.Context, api client.Reader, read assign.Carrying, pool *ippoolv1.NodeIPPool) (assign.Carrying, error) {
	if c != nil && read.Carriers == nil {
		all, err := c.Of(ctx)
		if err != nil {
			return read, err
		}
		read.Carriers = make(map[netip.Addr][]string, len(all))
		for ip, nodes := range all {
			read.Carriers[ip] = slices.Clone(nodes)
		}
	}
	return c.Within(ctx, api, read, nil, pool)
}

// Within is lifecycle.WithCarriers (the carriers of rng's addresses whose
// Node exists), with the addresses the state of a Node deleted less than
// Hold ago shows still carried by that node: its machine may run on and
// carry them until its handler, which publishes nothing once its Node is
// gone, takes them off; the departure hold is the time it has, as for
// the addresses its records held. Those pool (nil: none) quarantines or
// keeps for that node are its records' addresses, which the departure
// rules hold already, and are left to them.
func (c *Carriers) Within(ctx context.Context, api client.Reader, read assign.Carrying, rng *ippool.Range,
	pool *ippoolv1.NodeIPPool) (assign.Carrying, error) {
	out, gone, err := lifecycle.WithCarriersGone(ctx, api, read, rng)
	if err != nil || c == nil || c.Hold <= 0 {
		return out, err
	}
	if pool != nil {
		for _, q := range pool.Status.Quarantined {
			dropDeparted(gone, q.IP, q.Node)
		}
		for _, k := range pool.Status.KeptForReturn {
			dropDeparted(gone, k.IP, k.Node)
		}
	}
	held := c.holding(gone, time.Now())
	if len(held) > 0 && out.Carriers == nil {
		out.Carriers = map[netip.Addr][]string{}
	}
	for ip, nodes := range held {
		out.Carriers[ip] = append(out.Carriers[ip], nodes...)
	}
	return out, nil
}

// dropDeparted takes node off the departed carriers of ip, in gone.
func dropDeparted(gone map[netip.Addr][]string, ip, node string) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return
	}
	if nodes := slices.DeleteFunc(gone[addr], func(n string) bool { return n == node }); len(nodes) > 0 {
		gone[addr] = nodes
	} else {
		delete(gone, addr)
	}
}

// holding returns the part of gone (by address, the departed nodes whose
// states show it) whose Node was deleted less than Hold before now; a
// node the watch did not see deleted (before it started, or without a
// watch) counts from now.
func (c *Carriers) holding(gone map[netip.Addr][]string, now time.Time) map[netip.Addr][]string {
	held := map[netip.Addr][]string{}
	for ip, nodes := range gone {
		for _, node := range nodes {
			if now.Sub(c.departedAt(node, now)) < c.Hold {
				held[ip] = append(held[ip], node)
			}
		}
	}
	return held
}

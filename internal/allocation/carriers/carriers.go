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
	states cache.Informer
	synced func() bool
	api    client.Reader
	// nodesSynced reports whether the watch has listed every Node once.
	nodesSynced func() bool

	// seen counts the watch's events; Of keeps its answer from the
	// watch (memo) until the count moves: the asks of a burst read
	// what the nodes carry once, not each one from every state.
	seen   atomic.Uint64
	mu     sync.Mutex
	memo   map[netip.Addr][]string
	memoAt uint64

	// Hold is how long what the state of a deleted Node showed still
	// counts as carried, from when its Node was deleted, whether or not
	// the state is collected meanwhile (periods.DefaultDepartureHold by
	// default; the pool controller sets its departure hold; 0: not at
	// all).
	Hold     time.Duration
	departed departures
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
	carriers := &Carriers{cache: c, states: informer, synced: informer.HasSynced, api: api, Hold: periods.DefaultDepartureHold}
	// The handler runs once the watch's store has the change: an answer
	// read after a count includes every change counted.
	seen := func() { carriers.seen.Add(1) }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { seen() },
		UpdateFunc: func(any, any) { seen() },
		DeleteFunc: func(o any) { seen(); carriers.stateDeleted(o) },
	}); err != nil {
		return nil, fmt.Errorf("watch NodeNetworkStates, for the addresses nodes carry: %w", err)
	}
	// The Nodes, as names only, for when each was deleted: what its state
	// shows is held from then.
	nodes, err := c.GetInformer(context.Background(), nodemeta.Object(""))
	if err != nil {
		return nil, fmt.Errorf("watch Nodes, for when a node whose state shows addresses was deleted: %w", err)
	}
	carriers.nodesSynced = nodes.HasSynced
	if _, err := nodes.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { carriers.departed.back(nameOf(o), time.Now(), carriers.Hold) },
		UpdateFunc: func(_, o any) { carriers.departed.back(nameOf(o), time.Now(), carriers.Hold) },
		DeleteFunc: func(o any) { carriers.nodeDeleted(nameOf(o)) },
	}); err != nil {
		return nil, fmt.Errorf("watch Nodes, for when a node whose state shows addresses was deleted: %w", err)
	}
	return carriers, nil
}

// unwrap returns a watched object, or the one a deletion missed by the
// watch stood for.
func unwrap(o any) any {
	if gone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		return gone.Obj
	}
	return o
}

// nameOf returns the name of a watched object (unwrap).
func nameOf(o any) string {
	if m, ok := unwrap(o).(metav1.Object); ok {
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

// nodeDeleted remembers that node's Node is deleted now, with what its
// state shows, if the watch of the states has it.
func (c *Carriers) nodeDeleted(node string) {
	var nns nncev1beta1.NodeNetworkState
	var shows []netip.Addr
	if c.synced() && c.cache.Get(context.Background(), client.ObjectKey{Name: node}, &nns) == nil {
		shows = carriedBy(&nns)
	}
	c.departed.deleted(node, time.Now(), shows)
}

// stateDeleted remembers what a collected state showed: its Node may be
// deleted (the watch of the Nodes may see that after), and its machine
// carry it still, for the rest of the hold.
func (c *Carriers) stateDeleted(o any) {
	if nns, ok := unwrap(o).(*nncev1beta1.NodeNetworkState); ok {
		c.departed.collected(nns.Name, time.Now(), c.Hold, carriedBy(nns))
	}
}

// nodes returns the reader Within lists the Nodes with: the watch's,
// once synced, where the states are read already; api otherwise. Either
// errs only towards holding: a Node the watch has not seen made yet
// counts as gone, its state's addresses held; one it has not seen
// deleted yet as live, its state's addresses carried.
func (c *Carriers) nodes(api client.Reader, read assign.Carrying) client.Reader {
	if c != nil && c.cache != nil && read.Carriers != nil && c.nodesSynced() {
		return c.cache
	}
	return api
}

// stateExists reports whether the watch has the state of node, or may:
// true until it has synced (a read of an unsynced cache waits for it).
func (c *Carriers) stateExists(node string) bool {
	if c.cache == nil || !c.synced() {
		return c.cache != nil
	}
	var nns nncev1beta1.NodeNetworkState
	return c.cache.Get(context.Background(), client.ObjectKey{Name: node}, &nns) == nil
}

// carriedBy returns the addresses a state shows carried.
func carriedBy(nns *nncev1beta1.NodeNetworkState) []netip.Addr {
	var out []netip.Addr
	for ip := range netstate.Carriers(nns.Status.CurrentState.Raw) {
		out = append(out, ip)
	}
	return out
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

// StateInformer returns the informer of the NodeNetworkStates, reduced
// to what they carry (netstate.CarriedState), whose store Of reads: a
// controller that watches it hears of a change once Of shows it, and its
// start does not wait for the watch to sync (Of does not either). Nil for
// Carriers without a watch.
func (c *Carriers) StateInformer() cache.Informer {
	if c == nil {
		return nil
	}
	return c.states
}

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
func (c *Carriers) Complete(ctx context.Context, api client.Reader, read assign.Carrying) (assign.Carrying, error) {
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
	return c.Within(ctx, api, read, nil)
}

// Within is lifecycle.WithCarriers (the carriers of rng's addresses whose
// Node exists), with the addresses the state of a Node deleted less than
// Hold ago showed still carried by that node, whether the state is still
// there or collected since: its machine may run on and carry them until
// its handler, which publishes nothing once its Node is gone, takes them
// off; the departure hold is the time it has, as for the addresses its
// records held. A Node this process did not see deleted (before its
// watch started) counts from when a read first finds its state without
// it.
func (c *Carriers) Within(ctx context.Context, api client.Reader, read assign.Carrying, rng *ippool.Range) (assign.Carrying, error) {
	out, gone, err := lifecycle.WithCarriersGone(ctx, c.nodes(api, read), read, rng)
	if err != nil || c == nil || c.Hold <= 0 {
		return out, err
	}
	now := time.Now()
	for ip, nodes := range gone {
		for _, node := range nodes {
			c.departed.found(node, now, []netip.Addr{ip})
		}
	}
	for ip, nodes := range c.departed.held(now, c.Hold, c.stateExists) {
		if rng != nil {
			if _, err := rng.Assignable(ip); err != nil {
				continue
			}
		}
		if out.Carriers == nil {
			out.Carriers = map[netip.Addr][]string{}
		}
		for _, node := range nodes {
			if !slices.Contains(out.Carriers[ip], node) {
				out.Carriers[ip] = append(out.Carriers[ip], node)
			}
		}
	}
	return out, nil
}

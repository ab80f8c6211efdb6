package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// ReadsAtOnce bounds the NodeNetworkStates ReadStates reads at once, and
// ListStatesFrom is how many nodes make it list every state once instead:
// a pass that serves or checks hundreds of nodes at once (the start of a
// rollout, a pooled policy created over a fleet or deleted from it) would
// otherwise wait on hundreds of reads behind the client's rate limit,
// while a list of every state costs its decoding, which a pass of a few
// nodes of a large fleet is better without.
const (
	ReadsAtOnce    = 32
	ListStatesFrom = 128
)

// States are the NodeNetworkStates ReadStates read.
type States struct {
	// ByNode holds the state of each node asked for that has one.
	ByNode map[string]*nncev1beta1.NodeNetworkState
	// All holds every node's state when they were listed, nil when they
	// were read one by one.
	All []nncev1beta1.NodeNetworkState
}

// ReadStates reads the NodeNetworkStates of nodes from reader, ReadsAtOnce
// at once, or, from listFrom nodes on, lists every state once. A node that
// has no state object is left out of ByNode; one whose state cannot be
// read is an error.
func ReadStates(ctx context.Context, reader client.Reader, nodes []string, listFrom int) (States, error) {
	nodes = slices.Compact(slices.Sorted(slices.Values(nodes)))
	out := States{ByNode: make(map[string]*nncev1beta1.NodeNetworkState, len(nodes))}
	if len(nodes) == 0 {
		return out, nil
	}
	if len(nodes) >= listFrom {
		all, err := listStates(ctx, reader)
		if err != nil {
			return out, err
		}
		out.All = all
		for i := range all {
			if _, ok := slices.BinarySearch(nodes, all[i].Name); ok {
				out.ByNode[all[i].Name] = &all[i]
			}
		}
		return out, nil
	}
	read := make([]*nncev1beta1.NodeNetworkState, len(nodes))
	var g errgroup.Group
	g.SetLimit(ReadsAtOnce)
	for i, node := range nodes {
		g.Go(func() error {
			var nns nncev1beta1.NodeNetworkState
			switch err := reader.Get(ctx, types.NamespacedName{Name: node}, &nns); {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return fmt.Errorf("read the NodeNetworkState of node %s: %w", node, err)
			}
			read[i] = &nns
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	for i, nns := range read {
		if nns != nil {
			out.ByNode[nodes[i]] = nns
		}
	}
	return out, nil
}

// ReadCarrying reads, from the API server, what nodes carry, for the
// adoption of their first addresses from pool (assign.Carrying), the same
// for every kind that serves nodes: the state of each of nodes, and, when
// one of them carries an address of the range, every node's, to make sure
// no other node carries it too. Whether the address is free is left to the
// chooser, on the pool its write reads: a copy of the pool read earlier
// could show it taken when it is free by then. records are the holders'
// records (holder.List), for what each node holds already. A node that has
// published no state adopts nothing; a state that cannot be read is an
// error: serving its node without it would renumber what it carries. A
// decision to adopt does not rest on a cache: a stale state could show an
// address its node gave up since.
func ReadCarrying(ctx context.Context, reader client.Reader, pool *ippoolv1.NodeIPPool, nodes []string,
	records []holder.Record) (assign.Carrying, error) {
	nodes = slices.Compact(slices.Sorted(slices.Values(nodes)))
	c := assign.Carrying{ByNode: map[string]map[netip.Addr]string{}}
	if len(nodes) == 0 {
		return c, nil
	}
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return c, nil // a range that hands out nothing adopts nothing
	}
	states, err := ReadStates(ctx, reader, nodes, ListStatesFrom)
	if err != nil {
		return c, fmt.Errorf("read what the nodes carry: %w", err)
	}
	c.ByNode = staticOf(states.ByNode)
	all := states.All
	if all != nil || carriesInRange(c.ByNode, rng) {
		if all == nil {
			if all, err = listStates(ctx, reader); err != nil {
				return c, fmt.Errorf("read what the nodes carry: %w", err)
			}
		}
		c.Carriers = assign.CarriersOf(all)
	}
	for _, rec := range records {
		if _, ok := c.ByNode[rec.Node]; ok {
			c.Hold(rec.Node, rec.Pools)
		}
	}
	return c, nil
}

// WithCarriers completes c with the carriers of every address of rng (of
// any range when rng is nil) the state of a Node that exists shows
// (listed from the API server when ReadCarrying left them out because no
// asking node carries an address of the range): a writer that hands out
// new addresses keeps those other nodes carry out of reach
// (assign.Chooser.Avoid). The state of a Node that is gone counts for
// nothing: it outlives its Node only until it is collected, and an
// address the Node's machine may still carry is held by the departure
// rules, not by its state (carriers.Carriers holds what such a state
// shows for the departure hold, WithCarriersGone); counted, it would keep
// the address from every node for good where nothing collects it.
//
// The Nodes are listed after the states, and only when a state shows an
// address of rng: a Node made between the two lists is one whose state
// the first did not show, and most pools' ranges are carried by no node
// (a consistent list of Nodes, which change seldom, waits on the API
// server's watch cache to catch up).
func WithCarriers(ctx context.Context, reader client.Reader, c assign.Carrying, rng *ippool.Range) (assign.Carrying, error) {
	c, _, err := WithCarriersGone(ctx, reader, c, rng)
	return c, err
}

// WithCarriersGone is WithCarriers, and returns besides, by address of
// rng, the nodes whose Node is gone that their states show carrying it.
func WithCarriersGone(ctx context.Context, reader client.Reader, c assign.Carrying,
	rng *ippool.Range) (assign.Carrying, map[netip.Addr][]string, error) {
	if c.Carriers == nil {
		all, err := listStates(ctx, reader)
		if err != nil {
			return c, nil, fmt.Errorf("read what the nodes carry: %w", err)
		}
		c.Carriers = assign.CarriersOf(all)
	}
	if rng != nil {
		for ip := range c.Carriers {
			if _, err := rng.Assignable(ip); err != nil {
				delete(c.Carriers, ip)
			}
		}
	}
	if len(c.Carriers) == 0 {
		return c, nil, nil
	}
	var nodes metav1.PartialObjectMetadataList
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := reader.List(ctx, &nodes); err != nil {
		return c, nil, fmt.Errorf("list Nodes, for the addresses their networks carry: %w", err)
	}
	live := make(map[string]bool, len(nodes.Items))
	for _, n := range nodes.Items {
		live[n.Name] = true
	}
	var gone map[netip.Addr][]string
	for ip, carriers := range c.Carriers {
		if departed := slices.DeleteFunc(slices.Clone(carriers), func(node string) bool { return live[node] }); len(departed) > 0 {
			if gone == nil {
				gone = map[netip.Addr][]string{}
			}
			gone[ip] = departed
		}
		carriers = slices.DeleteFunc(slices.Clone(carriers), func(node string) bool { return !live[node] })
		if len(carriers) == 0 {
			delete(c.Carriers, ip)
			continue
		}
		c.Carriers[ip] = carriers
	}
	return c, gone, nil
}

// carriesInRange reports whether a node of byNode carries an address rng
// hands out.
func carriesInRange(byNode map[string]map[netip.Addr]string, rng *ippool.Range) bool {
	for _, carried := range byNode {
		for ip := range carried {
			if _, err := rng.Assignable(ip); err == nil {
				return true
			}
		}
	}
	return false
}

// listStates lists every NodeNetworkState from the API server.
func listStates(ctx context.Context, reader client.Reader) ([]nncev1beta1.NodeNetworkState, error) {
	var list nncev1beta1.NodeNetworkStateList
	if err := reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list NodeNetworkStates: %w", err)
	}
	return list.Items, nil
}

// staticOf returns, for each node of states that has published a state,
// the static addresses it carries (not learned by DHCP or autoconf: a
// lease is the DHCP server's to give) and where. A node that has published
// none (no object, or one without a state yet) is left out.
func staticOf(states map[string]*nncev1beta1.NodeNetworkState) map[string]map[netip.Addr]string {
	out := map[string]map[netip.Addr]string{}
	for node, nns := range states {
		if Published(nns) {
			out[node] = netstate.StaticCarriers(nns.Status.CurrentState.Raw)
		}
	}
	return out
}

// Published reports whether a NodeNetworkState holds a state: a handler
// creates the object first and writes the state after, and an object
// without one says nothing of what its node carries.
func Published(nns *nncev1beta1.NodeNetworkState) bool {
	return len(nns.Status.CurrentState.Raw) > 0 && !nns.Status.LastSuccessfulUpdateTime.IsZero()
}

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

// parallelReads bounds the NodeNetworkStates ReadCarrying reads at once,
// and listStatesFrom is how many nodes make it list every state once
// instead: a pass that serves hundreds of nodes at once (the start of a
// rollout, a pooled policy created over a fleet) would otherwise wait on
// hundreds of reads behind the client's rate limit, while a list of every
// state costs its decoding, which a pass of a few nodes is better without.
const (
	parallelReads  = 32
	listStatesFrom = 128
)

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
	var all []nncev1beta1.NodeNetworkState
	if len(nodes) >= listStatesFrom {
		if all, err = listStates(ctx, reader); err != nil {
			return c, err
		}
		c.ByNode = staticOf(all, nodes)
	} else if c.ByNode, err = statesOf(ctx, reader, nodes); err != nil {
		return c, err
	}
	if all != nil || carriesInRange(c.ByNode, rng) {
		if all == nil {
			if all, err = listStates(ctx, reader); err != nil {
				return c, err
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

// WithCarriers completes c with the carriers of every address the state
// of a Node that exists shows (listed from the API server when
// ReadCarrying left them out because no asking node carries an address
// of the range): a writer that hands out new addresses keeps those other
// nodes carry out of reach (assign.Chooser.Avoid). The state of a Node
// that is gone counts for nothing: it outlives its Node only until it is
// collected, and an address the Node's machine may still carry is held
// by the departure rules, not by its state; counted, it would keep the
// address from every node for good where nothing collects it.
func WithCarriers(ctx context.Context, reader client.Reader, c assign.Carrying) (assign.Carrying, error) {
	var nodes metav1.PartialObjectMetadataList
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := reader.List(ctx, &nodes); err != nil {
		return c, fmt.Errorf("list Nodes, for the addresses their networks carry: %w", err)
	}
	live := make(map[string]bool, len(nodes.Items))
	for _, n := range nodes.Items {
		live[n.Name] = true
	}
	if c.Carriers == nil {
		all, err := listStates(ctx, reader)
		if err != nil {
			return c, err
		}
		c.Carriers = assign.CarriersOf(all)
	}
	for ip, carriers := range c.Carriers {
		carriers = slices.DeleteFunc(slices.Clone(carriers), func(node string) bool { return !live[node] })
		if len(carriers) == 0 {
			delete(c.Carriers, ip)
			continue
		}
		c.Carriers[ip] = carriers
	}
	return c, nil
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
		return nil, fmt.Errorf("list NodeNetworkStates, for what the nodes carry: %w", err)
	}
	return list.Items, nil
}

// staticOf returns, for each of nodes that states has a published state
// of, the static addresses it carries and where.
func staticOf(states []nncev1beta1.NodeNetworkState, nodes []string) map[string]map[netip.Addr]string {
	out := map[string]map[netip.Addr]string{}
	for i := range states {
		if _, ok := slices.BinarySearch(nodes, states[i].Name); ok && Published(&states[i]) {
			out[states[i].Name] = netstate.StaticCarriers(states[i].Status.CurrentState.Raw)
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

// statesOf reads the NodeNetworkStates of nodes: by node, the static
// addresses each carries (not learned by DHCP or autoconf: a lease is the
// DHCP server's to give) and where. A node that has published none (no
// object, or one without a state yet) is left out.
func statesOf(ctx context.Context, reader client.Reader, nodes []string) (map[string]map[netip.Addr]string, error) {
	states := make([]map[netip.Addr]string, len(nodes))
	var g errgroup.Group
	g.SetLimit(parallelReads)
	for i, node := range nodes {
		g.Go(func() error {
			var nns nncev1beta1.NodeNetworkState
			err := reader.Get(ctx, types.NamespacedName{Name: node}, &nns)
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return fmt.Errorf("read the NodeNetworkState of node %s, for what it carries: %w", node, err)
			case !Published(&nns):
				return nil
			}
			states[i] = netstate.StaticCarriers(nns.Status.CurrentState.Raw)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := map[string]map[netip.Addr]string{}
	for i, node := range nodes {
		if states[i] != nil {
			out[node] = states[i]
		}
	}
	return out, nil
}

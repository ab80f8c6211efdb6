package pool

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

// carriedView is what the nodes that ask for their first addresses carry
// on their interfaces, for adoption (assign.Claimant.Carried): read once
// per serve, before the pool write, whose mutation reads nothing.
type carriedView struct {
	// byNode maps a requesting node to what its NodeNetworkState shows:
	// address to interface.
	byNode map[string]map[netip.Addr]string
	// carriers maps each address that some node carries to the nodes
	// that carry it; nil when no requesting node
	// carries a free address of the range (then it is not needed).
	carriers map[netip.Addr][]string
	// held maps a requesting node to the addresses its enactments record
	// or release (from the cache).
	held map[string]map[netip.Addr]bool
}

// carriedFor reads the NodeNetworkStates of the nodes whose requests ask
// for a capture that has never had an address: a capture's first address
// may be one its node already carries (adoption). A request the cached
// pool shows served already is read too: its entry may be gone from the
// latest pool (its record refused, its addresses withdrawn), and it is
// served again, adoption included. Only when such a node
// carries an address of the range that the pool neither holds nor
// quarantines does it read every node's state, to make sure no other node
// carries it too. A node that has published no state adopts nothing; a
// state that cannot be read serves nobody this pass (an error): serving
// without it would renumber what its node carries.
func (r *Reconciler) carriedFor(ctx context.Context, pool *ippoolv1.NodeIPPool, requests []*request,
	records []holder.Record) (carriedView, error) {
	v := carriedView{byNode: map[string]map[netip.Addr]string{}, held: map[string]map[netip.Addr]bool{}}
	var nodes []string
	for _, rq := range requests {
		if node := rq.enactment.Labels[shared.EnactmentNodeLabel]; node != "" && rq.first() {
			nodes = append(nodes, node)
		}
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	if len(nodes) == 0 {
		return v, nil
	}
	var err error
	if v.byNode, err = r.statesOf(ctx, nodes); err != nil {
		return v, err
	}
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return v, nil
	}
	alloc, err := poolstatus.Allocator(pool)
	if err != nil {
		return v, nil
	}
	if carriesFree(v.byNode, rng, alloc) {
		v.carriers = r.carriersOf(ctx)
	}
	for _, rec := range records {
		if _, ok := v.byNode[rec.Node]; ok {
			v.hold(rec.Node, rec.Pools)
		}
	}
	return v, nil
}

// statesOf reads the NodeNetworkStates of nodes: by node, the static
// addresses each carries (not learned by DHCP or autoconf: a lease is the
// DHCP server's to give) and where. A node that has published none is
// left out; a state that cannot be read is an error: serving its node
// without it would renumber what it carries.
func (r *Reconciler) statesOf(ctx context.Context, nodes []string) (map[string]map[netip.Addr]string, error) {
	states := make([]map[netip.Addr]string, len(nodes))
	var g errgroup.Group
	g.SetLimit(parallelRecords)
	for i, node := range nodes {
		g.Go(func() error {
			var nns nncev1beta1.NodeNetworkState
			err := r.APIReader.Get(ctx, types.NamespacedName{Name: node}, &nns)
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return fmt.Errorf("read the NodeNetworkState of node %s, for what it carries: %w", node, err)
			}
			states[i] = nmstatectl.StaticCarriers(nns.Status.CurrentState.Raw)
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

// carriesFree reports whether a node carries an address of rng that alloc
// has free.
func carriesFree(byNode map[string]map[netip.Addr]string, rng *ippool.Range, alloc *ippool.Allocator) bool {
	for _, carried := range byNode {
		for ip := range carried {
			if off, err := rng.Assignable(ip); err == nil && !alloc.Has(off) {
				return true
			}
		}
	}
	return false
}

// hold notes the addresses a record of node holds or releases.
func (v carriedView) hold(node string, pools ippoolv1.EnactmentIPPools) {
	for _, a := range pools {
		for _, s := range a.Held() {
			if ip, err := netip.ParseAddr(s); err == nil {
				if v.held[node] == nil {
					v.held[node] = map[netip.Addr]bool{}
				}
				v.held[node][ip] = true
			}
		}
	}
}

// carriersOf maps every address a node's NodeNetworkState shows to the
// nodes that carry it; nil if the states cannot be read.
func (r *Reconciler) carriersOf(ctx context.Context) map[netip.Addr][]string {
	var list nncev1beta1.NodeNetworkStateList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return nil
	}
	return assign.CarriersOf(list.Items)
}

// first reports whether some capture the request asks for has never had
// an address in the enactment.
func (rq *request) first() bool {
	for _, ref := range rq.refs {
		if _, ok := rq.enactment.Status.CapturedStates[ref.Capture]; !ok {
			return true
		}
	}
	return false
}

// adoption completes the claimant of a request with what its node
// carries on the interfaces each capture's template configures; captures
// that had an address before adopt nothing.
func (v carriedView) adoption(cl assign.Claimant, rq *request) assign.Claimant {
	carried, ok := v.byNode[cl.Node]
	if !ok {
		return cl
	}
	cl.Carried = func(captureName string) []assign.Carried {
		if _, had := rq.enactment.Status.CapturedStates[captureName]; had {
			return nil
		}
		return assign.OnInterfaces(carried, rq.ifaces[captureName])
	}
	held := v.held[cl.Node]
	cl.Holds = func(ip netip.Addr) bool { return held[ip] }
	if v.carriers != nil {
		cl.CarriedElsewhere = assign.ElsewhereThan(v.carriers, cl.Node)
	}
	return cl
}

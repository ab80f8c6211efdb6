package pool

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// carriedFor reads what the nodes carry whose requests ask for a capture
// that has never had an address: a capture's first address may be one its
// node already carries (adoption, read as for every kind by
// lifecycle.ReadCarrying), and no address is handed to a node while
// another node carries it (lifecycle.WithCarriers). A request the cached pool shows served already
// is read too: its entry may be gone from the latest pool (its record
// refused, its addresses withdrawn), and it is served again, adoption
// included.
func (r server) carriedFor(ctx context.Context, pool *ippoolv1.NodeIPPool, requests []*request,
	records []holder.Record) (assign.Carrying, error) {
	var nodes []string
	for _, rq := range requests {
		if node := rq.enactment.Labels[shared.EnactmentNodeLabel]; node != "" && rq.first() {
			nodes = append(nodes, node)
		}
	}
	c, err := lifecycle.ReadCarrying(ctx, r.APIReader, pool, nodes, records)
	if err != nil {
		return c, err
	}
	return r.Carried.Complete(ctx, r.APIReader, c)
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

// adoption completes the asker of a request with what its node
// carries on the interfaces each capture's template configures; captures
// that had an address before adopt nothing.
func adoption(c assign.Carrying, cl assign.Asker, rq *request) assign.Asker {
	return c.Adopting(cl, func(captureName string) []string {
		if _, had := rq.enactment.Status.CapturedStates[captureName]; had {
			return nil
		}
		return rq.ifaces[captureName]
	})
}

// givingBack is what unrecorded found: by address, the node that carries
// it and may get it back; the owners every holder's record on the API
// server names; and the resourceVersion of the pool read before those
// records (the fence: see giveBack).
type givingBack struct {
	nodes  map[netip.Addr]string
	owners poolstatus.Owners
	fence  string
}

// unrecorded finds the addresses the asking nodes carry that the pool has
// set but that no holder records and no entry holds, each carried by its
// node alone: a record lost, or an entry restored from a backup whose
// holder is gone (dropped, its bit left set). The address is its node's,
// and the node gets it back rather than a new one. Garbage collection
// would hold it for that node too, but only after the grace period, by
// when the node would have been served another address; a rebuild does
// it for the states published when it runs, this for those published
// after. What the cache shows is read again from the API server, the
// pool first, then every holder's record; when they cannot be read, the
// error comes with a givingBack that makes those nodes wait.
func (r server) unrecorded(ctx context.Context, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, v view,
	carried assign.Carrying) (givingBack, error) {
	g := givingBack{nodes: map[netip.Addr]string{}}
	for node, ips := range carried.ByNode {
		for ip := range ips {
			if unrecordedOn(pool, alloc, v.owners, carried, node, ip) {
				g.nodes[ip] = node
			}
		}
	}
	if len(g.nodes) == 0 {
		return givingBack{}, nil
	}
	var fresh ippoolv1.NodeIPPool
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pool), &fresh)
	var hs holdings
	if err == nil {
		hs, err = r.holdingsFromAPI(ctx)
	}
	if err != nil {
		// Without the fence, those nodes wait (giveBack); the others
		// are served all the same, and the error comes after.
		return g, fmt.Errorf("confirm that the addresses nodes %s carry are unrecorded: %w",
			strings.Join(slices.Sorted(maps.Values(g.nodes)), ", "), err)
	}
	g.owners, g.fence = poolstatus.Holders(pool.Name, alloc.Range(), hs.records), fresh.ResourceVersion
	return g, nil
}

// giveBack quarantines in p, a pool being written, each address of g
// still unrecorded there for the node that carries it (the chooser adopts
// such an address for that node only), and returns them described. Every
// writer adds an address's in-flight entry before its holder records it,
// and prunes the entry after, each in a pool write: if p is the pool read
// before the records were, nothing was taken or recorded since unseen.
// If p has changed since (or the records could not be read), giveBack
// quarantines nothing and returns the nodes that must wait for the next
// pass instead of being served a new address.
func (g givingBack) giveBack(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, carried assign.Carrying,
	now metav1.Time) (held []string, wait map[string]bool) {
	if len(g.nodes) == 0 {
		return nil, nil
	}
	if g.fence == "" || p.ResourceVersion != g.fence {
		wait = map[string]bool{}
		for _, node := range g.nodes {
			wait[node] = true
		}
		return nil, wait
	}
	for _, ip := range slices.SortedFunc(maps.Keys(g.nodes), netip.Addr.Compare) {
		node := g.nodes[ip]
		if !unrecordedOn(p, alloc, g.owners, carried, node, ip) {
			continue
		}
		poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: ip.String(), Node: node, Since: now})
		held = append(held, ip.String()+" on node "+node)
	}
	return held, nil
}

// unrecordedOn reports whether node, which carries ip, may get it back as
// unrecorded: ip is in the range and set, held, kept or quarantined by no
// entry, recognized by no owner, and no other node carries it.
func unrecordedOn(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, owners poolstatus.Owners, carried assign.Carrying,
	node string, ip netip.Addr) bool {
	s := ip.String()
	if _, err := alloc.Range().Assignable(ip); err != nil || !alloc.HasIP(ip) || len(owners.Recognized(ip)) > 0 ||
		poolstatus.InFlightOf(pool, s) != nil || poolstatus.QuarantineOf(pool, s) != nil || poolstatus.KeptOf(pool, s) != nil {
		return false
	}
	return len(carried.Carriers[ip]) == 1 && carried.Carriers[ip][0] == node
}

package pool

import (
	"context"

	"github.com/nmstate/kubernetes-nmstate/api/shared"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
)

// carriedFor reads what the nodes carry whose requests ask for a capture
// that has never had an address: a capture's first address may be one its
// node already carries (adoption, read as for every kind by
// lifecycle.ReadCarrying). A request the cached pool shows served already
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
	return lifecycle.ReadCarrying(ctx, r.APIReader, pool, nodes, records)
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
func adoption(c assign.Carrying, cl assign.Claimant, rq *request) assign.Claimant {
	return c.Adopting(cl, func(captureName string) []string {
		if _, had := rq.enactment.Status.CapturedStates[captureName]; had {
			return nil
		}
		return rq.ifaces[captureName]
	})
}

package pool

import (
	"context"
	"fmt"
	"net/netip"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// holdings are what a pass reads of the pools' holders: the enactments,
// whose handlers ask and wait, and the record of every holder of every
// kind (holder.List), the enactments' included. A pool's claims are the
// records of any pool name whose address lies in its range.
type holdings struct {
	enactments []nncev1beta1.NodeNetworkConfigurationEnactment
	records    []holder.Record
}

// holdings lists every holder from the cache.
func (r *Reconciler) holdings(ctx context.Context) (holdings, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	// Every event of a thousand enactments brings the pool back: the items
	// are the cache's own, not copies. Never change them; copy one first.
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return holdings{}, fmt.Errorf("list enactments: %w", err)
	}
	return r.holdingsOf(ctx, r.Client, list.Items)
}

// holdingsFromAPI lists every holder from the API server, for decisions
// a stale cache could get wrong.
func (r *Reconciler) holdingsFromAPI(ctx context.Context) (holdings, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return holdings{}, fmt.Errorf("list enactments: %w", err)
	}
	return r.holdingsOf(ctx, r.APIReader, list.Items)
}

// holdingsOf adds to enactments the records of every holder, those of
// the kinds served (Cluster API claims, pooled policies' nodes) read
// through reader.
func (r *Reconciler) holdingsOf(ctx context.Context, reader client.Reader,
	enactments []nncev1beta1.NodeNetworkConfigurationEnactment) (holdings, error) {
	records, err := holder.List(ctx, reader, enactments,
		holder.Sources{Claims: r.IPAMVersion != "", Signer: r.Signer, PooledPolicies: r.PooledPolicies})
	return holdings{enactments: enactments, records: records}, err
}

// carriedAddresses maps every static address the nodes' NodeNetworkStates
// show to the node that carries it.
func (r *Reconciler) carriedAddresses(ctx context.Context) (map[netip.Addr]string, error) {
	var list nncev1beta1.NodeNetworkStateList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list NodeNetworkStates: %w", err)
	}
	out := map[netip.Addr]string{}
	for _, nns := range list.Items {
		for ip := range netstate.Carriers(nns.Status.CurrentState.Raw) {
			out[ip] = nns.Name
		}
	}
	return out, nil
}

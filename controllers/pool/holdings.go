package pool

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// holdingsFromAPI lists every holder as the API server has it, for
// decisions a stale cache could get wrong.
func (r *Reconciler) holdingsFromAPI(ctx context.Context) (holdings, error) {
	enactments, err := r.enactmentsFromAPI(ctx)
	if err != nil {
		return holdings{}, err
	}
	return r.holdingsOf(ctx, r.APIReader, enactments)
}

// staleEnactmentsRead is the most enactments behind the API server that
// enactmentsFromAPI reads one by one; with more, it lists them all.
const staleEnactmentsRead = 32

// enactmentsFromAPI returns every enactment as the API server has it
// now, at least. It lists their metadata from the API server and takes
// each from the cache where the cache has it at the same
// resourceVersion: the same object, without decoding a thousand desired
// states again in every pass of a large fleet. One the cache lacks, or
// has at another version, is read from the API server (one gone since
// is left out); beyond staleEnactmentsRead of them, every enactment is
// listed whole. The items of the cache are its own, as holdings' are:
// never change them.
func (r *Reconciler) enactmentsFromAPI(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	metas := &metav1.PartialObjectMetadataList{}
	metas.SetGroupVersionKind(nncev1beta1.GroupVersion.WithKind("NodeNetworkConfigurationEnactmentList"))
	if err := r.APIReader.List(ctx, metas); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	var cached nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.Client.List(ctx, &cached, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	out, stale := current(metas.Items, cached.Items)
	if len(stale) > staleEnactmentsRead {
		return r.enactmentsListed(ctx)
	}
	for _, name := range stale {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, &e); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("get enactment %s: %w", name, err)
		}
		out = append(out, e)
	}
	// In the API server's order, by name, as a list gives them.
	slices.SortFunc(out, func(a, b nncev1beta1.NodeNetworkConfigurationEnactment) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// enactmentsListed lists every enactment whole from the API server.
func (r *Reconciler) enactmentsListed(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	return list.Items, nil
}

// current returns the enactments of cached that metas (the API server's
// list) has at the same UID and resourceVersion, and the names of those
// of metas it does not.
func current(metas []metav1.PartialObjectMetadata, cached []nncev1beta1.NodeNetworkConfigurationEnactment) (
	[]nncev1beta1.NodeNetworkConfigurationEnactment, []string) {
	byName := make(map[string]*nncev1beta1.NodeNetworkConfigurationEnactment, len(cached))
	for i := range cached {
		byName[cached[i].Name] = &cached[i]
	}
	out := make([]nncev1beta1.NodeNetworkConfigurationEnactment, 0, len(metas))
	var stale []string
	for i := range metas {
		m := &metas[i]
		if c := byName[m.Name]; c != nil && c.UID == m.UID && c.ResourceVersion == m.ResourceVersion {
			out = append(out, *c)
		} else {
			stale = append(stale, m.Name)
		}
	}
	return out, stale
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

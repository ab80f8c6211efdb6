package pool

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
)

// claimHolds reports whether e is the only hold of a Cluster API claim on
// its address, which then stays in flight for as long as that is so: the
// claim, read from the API server, has the entry's UID as token, and
// either names the entry's address in its restore annotation (its
// IPAddress was deleted and is being created again: the machine the claim
// serves was given that address and may carry it whatever happens to the
// IPAddress; recorded tells that the old IPAddress still records it) or
// has no IPAddress yet (a pass that stalled between its pool write and
// the creation of the IPAddress: if the entry went, the address could be
// handed to another holder before the late IPAddress names it too). A
// claim's entry goes once the claim records it, records another address,
// or is gone. The annotation alone holds nothing: only the entry the
// controller wrote does.
func (r *Reconciler) claimHolds(ctx context.Context, e ippoolv1.InFlightAddress, recorded bool) (bool, error) {
	h := holder.Parse(e.HolderName())
	if h.Kind != holder.Claim || r.IPAMVersion == "" {
		return false, nil
	}
	key := types.NamespacedName{Namespace: h.Namespace, Name: h.Name}
	claim := capi.NewClaim(r.IPAMVersion)
	err := r.APIReader.Get(ctx, key, claim)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get IPAddressClaim %s: %w", key, err)
	case string(claim.GetUID()) != e.Token:
		return false, nil
	case claim.GetAnnotations()[capi.RestoreAnnotation] == e.IP:
		return true, nil
	case recorded:
		return false, nil
	}
	addr := capi.NewAddress(r.IPAMVersion)
	err = r.APIReader.Get(ctx, key, addr)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get IPAddress %s: %w", key, err)
	}
	// Created a moment ago with this address (pruned once the cache has
	// it), or with another: then the entry is left over.
	return capi.AddressOf(addr).IP.String() == e.IP, nil
}

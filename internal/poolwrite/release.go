package poolwrite

import (
	"context"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// Retire ends an enactment and gives its addresses back:
//
//  1. it deletes the enactment, so that no handler reuses its record (the
//     FinalizerIPPool finalizer keeps the object and the record);
//  2. it removes the finalizer under the enactment's resourceVersion, which
//     makes the API server drop the object; of several concurrent retirers
//     (the node's handler, the pool controller) exactly one succeeds;
//  3. that one releases the addresses the removed record held.
//
// It returns the addresses it released, by pool: nil when another retirer
// won, or when the enactment had no finalizer (its bits, if any, are then
// left to garbage collection). A release that fails is logged, not
// returned, because nothing could retry it: the record is already gone and
// garbage collection frees the bits after its grace period. Retire is
// idempotent; after an error, call it again.
func (w *Writer) Retire(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment) (ippoolv1.EnactmentIPPools, error) {
	if e.DeletionTimestamp.IsZero() {
		if err := w.Client.Delete(ctx, e, client.Preconditions{UID: &e.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("delete enactment %q: %w", e.Name, err)
		}
	}
	for attempt := 1; ; attempt++ {
		fresh, err := w.enactment(ctx, e.Name)
		if fresh == nil || err != nil || fresh.UID != e.UID || !controllerutil.ContainsFinalizer(fresh, ippoolv1.FinalizerIPPool) {
			return nil, err // gone, replaced, or another retirer owns the release
		}
		patch := client.MergeFromWithOptions(fresh.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(fresh, ippoolv1.FinalizerIPPool)
		err = w.Client.Patch(ctx, fresh, patch)
		switch {
		case err == nil:
			return w.releaseAll(ctx, e.Name, fresh.Status.IPPool), nil
		case apierrors.IsNotFound(err):
			return nil, nil
		case !apierrors.IsConflict(err):
			return nil, fmt.Errorf("remove the finalizer of enactment %q: %w", e.Name, err)
		case attempt >= w.Backoff.Steps:
			return nil, fmt.Errorf("remove the finalizer of enactment %q after %d attempts: %w", e.Name, attempt, ErrRetriesExhausted)
		}
		if err := w.sleep(ctx, w.Backoff.Delay(attempt)); err != nil {
			return nil, err
		}
	}
}

// Drop removes the record of one pool from an enactment (its status.ippool
// entry and the captured states holding those addresses) under the
// enactment's resourceVersion, then releases the addresses, so that the
// node's handler allocates again. It returns the addresses dropped from the
// record; nil if the enactment is gone or held nothing from the pool. As in
// Retire, a failed release is logged and left to garbage collection.
func (w *Writer) Drop(ctx context.Context, enactment, pool string) ([]string, error) {
	for attempt := 1; ; attempt++ {
		e, err := w.enactment(ctx, enactment)
		if e == nil || err != nil {
			return nil, err
		}
		held := e.Status.IPPool[pool].Allocated
		if len(held) == 0 {
			return nil, nil
		}
		forget(e, pool)
		err = w.Client.Status().Update(ctx, e)
		switch {
		case err == nil:
			w.releaseAll(ctx, enactment, ippoolv1.EnactmentIPPools{pool: {Allocated: held}})
			return held, nil
		case apierrors.IsNotFound(err):
			return nil, nil
		case !apierrors.IsConflict(err):
			return nil, fmt.Errorf("drop the %s addresses of enactment %q: %w", pool, enactment, err)
		case attempt >= w.Backoff.Steps:
			return nil, fmt.Errorf("drop the %s addresses of enactment %q after %d attempts: %w", pool, enactment, attempt, ErrRetriesExhausted)
		}
		if err := w.sleep(ctx, w.Backoff.Delay(attempt)); err != nil {
			return nil, err
		}
	}
}

// forget removes pool's record from e: the status.ippool entry and every
// captured state that holds one of its addresses.
func forget(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) {
	held := e.Status.IPPool[pool].Allocated
	delete(e.Status.IPPool, pool)
	for name, state := range e.Status.CapturedStates {
		if addr, ok := capture.ParseState(state.State.Raw); ok && slices.Contains(held, addr.IP.String()) {
			delete(e.Status.CapturedStates, name)
		}
	}
}

// enactment reads an enactment from the API server; nil when it is gone.
func (w *Writer) enactment(ctx context.Context, name string) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := w.Reader.Get(ctx, types.NamespacedName{Name: name}, &e); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get enactment %q: %w", name, err)
	}
	return &e, nil
}

// releaseAll releases a record that is gone and returns what it released.
func (w *Writer) releaseAll(ctx context.Context, enactment string, record ippoolv1.EnactmentIPPools) ippoolv1.EnactmentIPPools {
	released := ippoolv1.EnactmentIPPools{}
	for _, pool := range slices.Sorted(maps.Keys(record)) {
		ips, err := w.Release(ctx, pool, record[pool].Allocated)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "could not release the addresses of a removed record; garbage collection frees them after its grace period",
				"enactment", enactment, "pool", pool, "ips", record[pool].Allocated)
			continue
		}
		if len(ips) > 0 {
			released[pool] = ippoolv1.PoolAllocation{Allocated: ips}
		}
	}
	return released
}

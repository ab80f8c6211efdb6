// Package retire takes addresses away from an enactment: Retire ends the
// enactment, Drop removes one pool's record from it. Both the node's
// handler and the pool controller use it, and any number of them may act on
// one enactment at once. An address leaves its holder in two steps, always
// in this order:
//
//  1. the record goes: the enactment's status.ippool entry (Drop) or the
//     enactment itself (Retire), written under the enactment's
//     resourceVersion, so that of several concurrent callers exactly one
//     succeeds;
//  2. that caller alone quarantines the addresses in their pools
//     (poolwrite.Writer.Quarantine): they stay allocated, handed to nobody,
//     until the pool controller sees that the former holder no longer
//     carries them.
//
// A bit is therefore never freed while an enactment records its address,
// and never handed to another node while its former holder may still carry
// it. A process that dies between the steps leaves set bits that no
// enactment claims; the pool controller's garbage collection frees them
// after its grace period.
package retire

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// errGone ends a retry loop when the enactment is gone, was replaced, or
// another retirer owns the release.
var errGone = errors.New("nothing left to retire")

// Retire ends an enactment and gives its addresses back:
//
//  1. it deletes the enactment, so that no handler reuses its record (the
//     FinalizerIPPool finalizer keeps the object and the record);
//  2. it removes the finalizer under the enactment's resourceVersion, which
//     makes the API server drop the object; of several concurrent retirers
//     (the node's handler, the pool controller) exactly one succeeds;
//  3. that one quarantines the addresses the removed record held.
//
// It returns the addresses it quarantined, by pool: nil when another
// retirer won, or when the enactment had no finalizer (its bits, if any,
// are then left to garbage collection). A quarantine that fails is logged,
// not returned, because nothing could retry it: the record is already gone
// and garbage collection frees the bits after its grace period. Retire is
// idempotent; after an error, call it again.
func Retire(ctx context.Context, w *poolwrite.Writer, e *nncev1beta1.NodeNetworkConfigurationEnactment) (ippoolv1.EnactmentIPPools, error) {
	if e.DeletionTimestamp.IsZero() {
		if err := w.Client.Delete(ctx, e, client.Preconditions{UID: &e.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("delete enactment %q: %w", e.Name, err)
		}
	}
	var removed *nncev1beta1.NodeNetworkConfigurationEnactment
	err := w.Retry(ctx, func() error {
		fresh, err := get(ctx, w, e.Name)
		if err != nil {
			return err
		}
		if fresh == nil || fresh.UID != e.UID || !controllerutil.ContainsFinalizer(fresh, ippoolv1.FinalizerIPPool) {
			return errGone
		}
		patch := client.MergeFromWithOptions(fresh.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(fresh, ippoolv1.FinalizerIPPool)
		if err := w.Client.Patch(ctx, fresh, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return errGone
			}
			return fmt.Errorf("remove the finalizer of enactment %q: %w", e.Name, err)
		}
		removed = fresh
		return nil
	})
	if errors.Is(err, errGone) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return quarantine(ctx, w, removed, removed.Status.IPPool), nil
}

// Drop removes the record of one pool from an enactment (its status.ippool
// entry and the captured states holding those addresses) under the
// enactment's resourceVersion, then quarantines the addresses, so that the
// node's handler allocates again. It returns the addresses dropped from the
// record; nil if the enactment is gone or held nothing from the pool. As in
// Retire, a failed quarantine is logged and left to garbage collection.
func Drop(ctx context.Context, w *poolwrite.Writer, enactment, pool string) ([]string, error) {
	var (
		held []string
		e    *nncev1beta1.NodeNetworkConfigurationEnactment
	)
	err := w.Retry(ctx, func() error {
		var err error
		if e, err = get(ctx, w, enactment); err != nil {
			return err
		}
		if e == nil {
			return errGone
		}
		if held = e.Status.IPPool[pool].Allocated; len(held) == 0 {
			return errGone
		}
		forget(e, pool)
		if err := w.Client.Status().Update(ctx, e); err != nil {
			if apierrors.IsNotFound(err) {
				return errGone
			}
			return fmt.Errorf("drop the %s addresses of enactment %q: %w", pool, enactment, err)
		}
		return nil
	})
	if errors.Is(err, errGone) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	quarantine(ctx, w, e, ippoolv1.EnactmentIPPools{pool: {Allocated: held}})
	return held, nil
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

// get reads an enactment from the API server; nil when it is gone.
func get(ctx context.Context, w *poolwrite.Writer, name string) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := w.Reader.Get(ctx, types.NamespacedName{Name: name}, &e); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get enactment %q: %w", name, err)
	}
	return &e, nil
}

// quarantine quarantines a record that is gone and returns what it
// quarantined.
func quarantine(ctx context.Context, w *poolwrite.Writer, e *nncev1beta1.NodeNetworkConfigurationEnactment,
	record ippoolv1.EnactmentIPPools) ippoolv1.EnactmentIPPools {
	q, err := w.Quarantine(ctx, HolderOf(e), record)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "could not quarantine the addresses of a removed record; garbage collection frees them after its grace period",
			"enactment", e.Name, "record", record)
	}
	return q
}

// HolderOf names the node and enactment that held an enactment's
// addresses, and the capture of each address its record still holds: those
// are kept for the enactment's return while quarantined. A record dropped
// by a reset holds none, so its addresses go to nobody.
func HolderOf(e *nncev1beta1.NodeNetworkConfigurationEnactment) poolwrite.Holder {
	h := poolwrite.Holder{Node: e.Labels[shared.EnactmentNodeLabel], Enactment: e.Name}
	for _, ref := range e.OwnerReferences {
		if ref.Kind == "Node" && ref.APIVersion == "v1" && ref.Name == h.Node {
			h.NodeUID = ref.UID
		}
	}
	for name, state := range e.Status.CapturedStates {
		if addr, ok := capture.ParseState(state.State.Raw); ok {
			if h.Captures == nil {
				h.Captures = map[string]string{}
			}
			h.Captures[addr.IP.String()] = name
		}
	}
	return h
}

// Package retire takes addresses away from an enactment: Retire ends the
// enactment, Drop removes one pool's record from it, Release takes back
// the addresses it asks to release. The pool controller uses it (and
// tests, as a second retirer), and any number of callers may act on one
// enactment at once. An address leaves its holder in two steps, always
// in this order:
//
//  1. the addresses are quarantined in their pools (lifecycle.Release,
//     as for every kind of holder): they stay allocated, handed to
//     nobody, until the pool controller has evidence that the former
//     holder no longer carries them;
//  2. the record goes: the enactment's status.ippool entry (Drop), its
//     releasing addresses (Release) or the enactment itself (Retire),
//     written under the enactment's resourceVersion, so that of several
//     concurrent callers one succeeds and the others find nothing left
//     (a removal of a deleted enactment's last finalizer is the one
//     exception: the API server lets several concurrent ones succeed, as
//     the object goes without a new resourceVersion; each quarantined
//     first, and a quarantine is idempotent).
//
// The record goes only once its quarantine is written: a failed
// quarantine is an error, and the record stays until a later call
// succeeds. So a bit is never unprotected: before step 1 the record
// claims it, after it the quarantine does. A process that dies between the
// steps leaves a quarantine beside a record that still claims the address;
// the pool controller lifts a quarantine only once no record claims its
// address, and the next call finishes the job (a deleted enactment is
// retired by the pool controller, a reset is done again until its
// annotation is removed).
package retire

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// errGone ends a retry loop when the enactment is gone, was replaced, or
// another retirer owns the release.
var errGone = errors.New("nothing left to retire")

// Retire ends an enactment and gives its addresses back:
//
//  1. it deletes the enactment, so that no handler reuses its record (the
//     FinalizerIPPool finalizer keeps the object and the record);
//  2. it quarantines the addresses the record holds;
//  3. it removes the finalizer under the enactment's resourceVersion, which
//     makes the API server drop the object. A retirer that reads the
//     object after another removed it finds nothing left; those that read
//     it at the same resourceVersion may all see their removal succeed
//     (the API server drops the object without a new resourceVersion, and
//     ignores a second drop).
//
// It returns the addresses it newly quarantined, by pool, when its
// removal of the finalizer succeeded: empty when another retirer's
// quarantine came first, and nil when another retirer removed the
// finalizer before it read the enactment, or it had none. Of several
// concurrent retirers at most one reports the addresses. A quarantine that fails is returned, with the finalizer still
// on. Retire is idempotent; after an error, call it again.
func Retire(ctx context.Context, w *poolwrite.Writer, e *nncev1beta1.NodeNetworkConfigurationEnactment) (ippoolv1.EnactmentIPPools, error) {
	ctx = audit.Default(ctx, "Retired", "enactment "+e.Name+" is deleted: its Node or its policy is gone, or the policy no longer selects the node")
	if e.DeletionTimestamp.IsZero() {
		if err := w.Client.Delete(ctx, e, client.Preconditions{UID: &e.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("delete enactment %q: %w", e.Name, err)
		}
	}
	var quarantined ippoolv1.EnactmentIPPools
	err := w.Retry(ctx, func() error {
		fresh, err := get(ctx, w, e.Name)
		if err != nil {
			return err
		}
		if fresh == nil || fresh.UID != e.UID || !controllerutil.ContainsFinalizer(fresh, ippoolv1.FinalizerIPPool) {
			return errGone
		}
		if quarantined, err = lifecycle.Release(ctx, w, lifecycle.OfEnactment(fresh)); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(fresh.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(fresh, ippoolv1.FinalizerIPPool)
		if err := w.Client.Patch(ctx, fresh, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return errGone
			}
			return fmt.Errorf("remove the finalizer of enactment %q: %w", e.Name, err)
		}
		return nil
	})
	if errors.Is(err, errGone) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return quarantined, nil
}

// Drop removes the record of one pool from an enactment (its status.ippool
// entry and the captured states holding those addresses): it quarantines
// the addresses, then writes the record without them under the
// enactment's resourceVersion, so that the node's handler allocates
// again. It returns the addresses dropped from the record; nil if the
// enactment is gone or held nothing from the pool. A quarantine that fails
// is returned, and the record stays.
func Drop(ctx context.Context, w *poolwrite.Writer, enactment, pool string) ([]string, error) {
	ctx = audit.Default(ctx, "Reset", "its record of NodeIPPool "+pool+" is dropped; the node is given a new address")
	var held []string
	err := w.Retry(ctx, func() error {
		e, err := get(ctx, w, enactment)
		if err != nil {
			return err
		}
		if e == nil {
			return errGone
		}
		if held = e.Status.IPPool[pool].Held(); len(held) == 0 {
			return errGone
		}
		// A reset's addresses go to nobody, not back to this enactment.
		if _, err := lifecycle.Release(ctx, w, lifecycle.OfEnactment(e).Only(ippoolv1.EnactmentIPPools{pool: {Allocated: held}}).WithoutReturn()); err != nil {
			return err
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
	return held, nil
}

// Release takes back the addresses an enactment asks to release
// (status.ippool[*].releasing, written by its handler or by the pool
// controller when it replaced them): it quarantines them, for nobody's
// return, then writes the record without them under the enactment's
// resourceVersion. It returns the addresses it removed, by pool; nil if
// the enactment is gone or asks nothing. A quarantine that fails is
// returned, and the record stays.
func Release(ctx context.Context, w *poolwrite.Writer, enactment string) (ippoolv1.EnactmentIPPools, error) {
	ctx = audit.Default(ctx, "Released", "the enactment's record no longer uses it (status.ippool releasing)")
	var released ippoolv1.EnactmentIPPools
	err := w.Retry(ctx, func() error {
		e, err := get(ctx, w, enactment)
		if err != nil {
			return err
		}
		if e == nil || !e.DeletionTimestamp.IsZero() {
			return errGone // retired whole
		}
		if released = Releasing(e); len(released) == 0 {
			return errGone
		}
		if _, err := lifecycle.Release(ctx, w, lifecycle.OfEnactment(e).Only(released).WithoutReturn()); err != nil {
			return err
		}
		for pool, a := range e.Status.IPPool {
			if a.Releasing = nil; len(a.Allocated) == 0 {
				delete(e.Status.IPPool, pool)
				continue
			}
			e.Status.IPPool[pool] = a
		}
		if err := w.Client.Status().Update(ctx, e); err != nil {
			if apierrors.IsNotFound(err) {
				return errGone
			}
			return fmt.Errorf("remove the released addresses of enactment %q: %w", enactment, err)
		}
		return nil
	})
	if errors.Is(err, errGone) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return released, nil
}

// Releasing returns the addresses an enactment asks to release, by pool;
// nil when there are none.
func Releasing(e *nncev1beta1.NodeNetworkConfigurationEnactment) ippoolv1.EnactmentIPPools {
	var out ippoolv1.EnactmentIPPools
	for pool, a := range e.Status.IPPool {
		if len(a.Releasing) == 0 {
			continue
		}
		if out == nil {
			out = ippoolv1.EnactmentIPPools{}
		}
		out[pool] = ippoolv1.PoolAllocation{Releasing: slices.Clone(a.Releasing)}
	}
	return out
}

// forget removes pool's record from e: the status.ippool entry and every
// captured state that holds one of its addresses.
func forget(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) {
	held := e.Status.IPPool[pool].Held()
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

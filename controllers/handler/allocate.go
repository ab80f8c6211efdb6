package handler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// errRecordTooLate is returned when fresh addresses could not be recorded
// within RecordDeadline of their pool write; they are given back and the
// request retried.
var errRecordTooLate = errors.New("the new addresses were not recorded in time")

// allocation is the result of serving a policy's ippool captures.
type allocation struct {
	// addresses holds the address of every ippool capture.
	addresses map[string]capture.Address
	// fresh lists, by pool, the addresses newly taken by this reconcile:
	// written to the pools but not yet recorded in the enactment.
	fresh map[string][]string
	// takenAt is when the first fresh address was written to its pool.
	takenAt time.Time
	// moved describes recorded addresses that were replaced because their
	// pool no longer hands them out.
	moved []string
}

// allocate serves every ippool capture of the policy, one pool at a time.
// A non-nil outcome means the enactment must wait (Pending) or cannot
// proceed (Failing). When a later pool blocks or fails, the addresses
// already taken from earlier pools are given back, so nothing stays
// allocated that no enactment records.
func (r *Reconciler) allocate(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, captures capture.Captures) (*allocation, *outcome, error) {
	a := &allocation{addresses: map[string]capture.Address{}, fresh: map[string][]string{}}
	for _, pool := range captures.Pools() {
		plan, blocked, err := r.allocateFromPool(ctx, policy, e, pool, captures.RefsOf(pool))
		if err != nil || blocked != nil {
			r.rollback(ctx, a)
			return nil, blocked, err
		}
		maps.Copy(a.addresses, plan.addresses)
		for _, name := range plan.fresh {
			a.fresh[pool] = append(a.fresh[pool], plan.addresses[name].IP.String())
		}
		if len(plan.fresh) > 0 && a.takenAt.IsZero() {
			a.takenAt = r.Clock.Now()
		}
		a.moved = append(a.moved, plan.moved...)
	}
	return a, nil, nil
}

// rollback returns the fresh addresses of an allocation that will not be
// recorded. Only call it when the record has certainly not been written;
// a failure to give them back leaves them to the pool controller's garbage
// collection.
func (r *Reconciler) rollback(ctx context.Context, a *allocation) {
	if err := r.checkRecordDeadline(a); err != nil {
		ctrl.LoggerFrom(ctx).Info("left unrecorded addresses to garbage collection", "fresh", a.fresh, "reason", err.Error())
		return
	}
	for pool, ips := range a.fresh {
		if _, err := r.Pools.Release(ctx, pool, ips); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "could not give back unrecorded addresses; the pool controller will collect them", "pool", pool, "ips", ips)
		}
	}
}

// checkRecordDeadline fails when fresh addresses are about to be recorded
// later than RecordDeadline after their pool write. The pool controller
// frees bits that no enactment claims for longer than its grace period;
// recording late could record an address that was freed and handed to
// another node meanwhile.
func (r *Reconciler) checkRecordDeadline(a *allocation) error {
	if a == nil || a.takenAt.IsZero() || r.RecordDeadline <= 0 {
		return nil
	}
	if late := r.Clock.Since(a.takenAt); late > r.RecordDeadline {
		return fmt.Errorf("%w: %s after the pool write, deadline %s", errRecordTooLate, late.Round(time.Millisecond), r.RecordDeadline)
	}
	return nil
}

// allocateFromPool serves the captures refs of one pool with at most one
// successful pool write, retried on conflicts by r.Pools.
func (r *Reconciler) allocateFromPool(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, poolName string, refs []capture.Ref) (*poolPlan, *outcome, error) {
	if plan, ok := r.settledByCache(ctx, e, poolName, refs); ok {
		return plan, nil, nil
	}
	var (
		plan    *poolPlan
		blocked *outcome
	)
	attempts, err := r.Pools.Update(ctx, poolName, func(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		plan, blocked = r.planWrite(ctx, policy, e, pool, alloc, refs)
		if blocked != nil || !plan.needsWrite() {
			return false, nil
		}
		r.Metrics.attempt(poolName)
		return true, nil
	})
	if err != nil {
		o, err := r.poolOutcome(poolName, refs, err)
		return nil, o, err
	}
	if blocked != nil {
		return nil, blocked, nil
	}
	if plan.needsWrite() {
		r.logAllocations(ctx, plan, refs, attempts)
	}
	return plan, nil, nil
}

// planWrite decides what one attempt writes to the pool: nothing when the
// recorded addresses are all indexed, otherwise the plan applied to alloc.
// A pool that is not available lets reused addresses through (its rebuild
// sets their bits) but blocks new ones.
func (r *Reconciler) planWrite(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator,
	refs []capture.Ref) (*poolPlan, *outcome) {
	plan := planPool(e, alloc, refs)
	if !plan.needsWrite() {
		return plan, nil
	}
	if ok, why := poolAvailable(pool); !ok {
		if len(plan.fresh) == 0 {
			plan.unsetBits = nil
			return plan, nil
		}
		o := pending(ippoolv1.ReasonIPPoolNotAvailable, why, r.PendingRequeue)
		return nil, &o
	}
	if err := plan.apply(alloc); err != nil {
		return nil, r.exhausted(ctx, policy, pool, err)
	}
	return plan, nil
}

// poolOutcome turns a failed pool read into the enactment's outcome, or
// returns the error to retry.
func (r *Reconciler) poolOutcome(name string, refs []capture.Ref, err error) (*outcome, error) {
	var o outcome
	switch {
	case apierrors.IsNotFound(err):
		o = failing(ippoolv1.ReasonIPPoolNotFound, fmt.Sprintf("NodeIPPool %q not found: create it, or fix capture %q", name, refs[0].Capture))
	case errors.Is(err, ippool.ErrInvalidRange):
		o = failing(ippoolv1.ReasonIPPoolInvalid, fmt.Sprintf("NodeIPPool %q cannot hand out addresses: %v", name, err))
	case errors.Is(err, poolwrite.ErrUnreadable):
		o = pending(ippoolv1.ReasonIPPoolNotAvailable,
			fmt.Sprintf("NodeIPPool %q has an unreadable status (%v); waiting for the pool controller to rebuild it", name, err),
			r.PendingRequeue)
	default:
		return nil, fmt.Errorf("allocate from NodeIPPool %q: %w", name, err)
	}
	return &o, nil
}

// settledByCache returns the plan when the cached pool shows that nothing
// needs writing, as in most reconciles, which then cost no API call.
// Anything else (a write, a missing or unusable pool) is decided on the API
// server's copy.
func (r *Reconciler) settledByCache(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment,
	poolName string, refs []capture.Ref) (*poolPlan, bool) {
	var pool ippoolv1.NodeIPPool
	if err := r.Client.Get(ctx, types.NamespacedName{Name: poolName}, &pool); err != nil {
		return nil, false
	}
	alloc, err := poolstatus.Allocator(&pool)
	if err != nil {
		return nil, false
	}
	plan := planPool(e, alloc, refs)
	return plan, !plan.needsWrite()
}

// exhausted turns a failed plan into a Failing outcome and tells the admin.
func (r *Reconciler) exhausted(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	pool *ippoolv1.NodeIPPool, err error) *outcome {
	var ex *errExhausted
	if !errors.As(err, &ex) {
		o := failing(ippoolv1.ReasonIPPoolInvalid, fmt.Sprintf("allocate from NodeIPPool %q: %v", pool.Name, err))
		return &o
	}
	msg := fmt.Sprintf("%s (node %s, policy %s)", ex.Error(), r.NodeName, policy.Name)
	r.Recorder.Eventf(pool, policy, corev1.EventTypeWarning, ippoolv1.ReasonExhaustedIPPool, "Allocate", msg)
	ctrl.LoggerFrom(ctx).Info("pool exhausted", "pool", pool.Name, "size", ex.size)
	o := failing(ippoolv1.ReasonIPPoolExhausted, ex.Error())
	return &o
}

func (r *Reconciler) logAllocations(ctx context.Context, plan *poolPlan, refs []capture.Ref, attempts int) {
	log := ctrl.LoggerFrom(ctx)
	for _, ref := range refs {
		if slices.Contains(plan.fresh, ref.Capture) {
			log.Info("allocated address", "pool", plan.pool, "capture", ref.Capture,
				"ip", plan.addresses[ref.Capture].IP.String(), "attempts", attempts)
		}
	}
	if len(plan.unsetBits) > 0 {
		log.Info("restored the bits of recorded addresses", "pool", plan.pool, "count", len(plan.unsetBits), "attempts", attempts)
	}
}

// unclaimed returns, by pool, the addresses the enactment records that no
// current capture uses (a dropped capture, a capture moved to another pool).
// They are released once the new record is written.
func unclaimed(e *nncev1beta1.NodeNetworkConfigurationEnactment, addresses map[string]capture.Address,
	captures capture.Captures) map[string][]string {
	kept := map[string][]string{}
	for _, ref := range captures.Refs {
		kept[ref.Pool] = append(kept[ref.Pool], addresses[ref.Capture].IP.String())
	}
	drop := map[string][]string{}
	for pool, held := range e.Status.IPPool {
		for _, ip := range held.Allocated {
			if !slices.Contains(kept[pool], ip) {
				drop[pool] = append(drop[pool], ip)
			}
		}
	}
	return drop
}

// releaseDropped gives back addresses the enactment no longer records. A
// failure is logged: the record is gone, so garbage collection frees them.
func (r *Reconciler) releaseDropped(ctx context.Context, dropped map[string][]string) {
	for pool, ips := range dropped {
		released, err := r.Pools.Release(ctx, pool, ips)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "could not release dropped addresses; the pool controller will collect them", "pool", pool, "ips", ips)
			continue
		}
		if len(released) > 0 {
			ctrl.LoggerFrom(ctx).Info("released addresses", "pool", pool, "ips", released)
		}
	}
}

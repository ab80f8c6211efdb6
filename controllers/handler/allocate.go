package handler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Backoff paces retries of a conflicting pool write: attempt n waits
// Initial*2^(n-1), capped at Max, scaled by a random factor in [0.5, 1.5).
// After Steps attempts the request is requeued.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Steps   int
	// Rand is the jitter source; it is used under a lock.
	Rand *rand.Rand
	mu   sync.Mutex
}

func (b *Backoff) delay(attempt int) time.Duration {
	d := b.Initial << min(attempt-1, 30)
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	b.mu.Lock()
	f := 0.5 + b.Rand.Float64()
	b.mu.Unlock()
	return time.Duration(float64(d) * f)
}

// errRetriesExhausted is returned when every attempt of a pool write met a
// conflict; controller-runtime requeues the request with its own backoff.
var errRetriesExhausted = errors.New("the pool kept changing under us")

// allocation is the result of serving a policy's ippool captures.
type allocation struct {
	// addresses holds the address of every ippool capture.
	addresses map[string]capture.Address
	// fresh lists, by pool, the addresses newly taken by this reconcile:
	// written to the pools but not yet recorded in the enactment.
	fresh map[string][]string
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
		for name, addr := range plan.addresses {
			a.addresses[name] = addr
		}
		for _, name := range plan.fresh {
			a.fresh[pool] = append(a.fresh[pool], plan.addresses[name].IP.String())
		}
	}
	return a, nil, nil
}

// rollback returns the fresh addresses of an allocation that will not be
// recorded. Only call it when the record has certainly not been written;
// a failure to give them back leaves them to the pool controller's garbage
// collection.
func (r *Reconciler) rollback(ctx context.Context, a *allocation) {
	for pool, ips := range a.fresh {
		if err := r.releaseFromPool(ctx, pool, ips); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "could not give back unrecorded addresses; the pool controller will collect them", "pool", pool, "ips", ips)
		}
	}
}

// allocateFromPool serves the captures refs of one pool with at most one
// successful pool write, retrying on conflicts.
func (r *Reconciler) allocateFromPool(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, poolName string, refs []capture.Ref) (*poolPlan, *outcome, error) {
	if plan, ok := r.settledByCache(ctx, e, poolName, refs); ok {
		return plan, nil, nil
	}
	for attempt := 1; ; attempt++ {
		pool, alloc, blocked, err := r.readPool(ctx, r.APIReader, poolName, refs)
		if err != nil || blocked != nil {
			return nil, blocked, err
		}
		plan := planPool(e, alloc, refs)
		if !plan.needsWrite() {
			return plan, nil, nil
		}
		if ok, why := poolAvailable(pool); !ok {
			if len(plan.fresh) == 0 {
				// Reused addresses only: the rebuild sets their bits.
				plan.unsetBits = nil
				return plan, nil, nil
			}
			o := pending(ippoolv1.ReasonIPPoolNotAvailable, why, r.PendingRequeue)
			return nil, &o, nil
		}
		if err := plan.apply(alloc); err != nil {
			return nil, r.exhausted(ctx, policy, pool, err), nil
		}
		poolstatus.Set(pool, alloc)
		r.Metrics.attempt(poolName)
		err = r.Client.Status().Update(ctx, pool)
		if err == nil {
			r.logAllocations(ctx, plan, refs, attempt)
			return plan, nil, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, nil, fmt.Errorf("write NodeIPPool %q: %w", poolName, err)
		}
		r.Metrics.conflict(poolName)
		if attempt >= r.Backoff.Steps {
			return nil, nil, fmt.Errorf("allocate from NodeIPPool %q after %d attempts: %w", poolName, attempt, errRetriesExhausted)
		}
		if err := r.sleep(ctx, r.Backoff.delay(attempt)); err != nil {
			return nil, nil, err
		}
	}
}

// settledByCache returns the plan when the cached pool shows that nothing
// needs writing, as in most reconciles, which then cost no API call.
// Anything else (a write, a missing or unusable pool) is decided on the API
// server's copy.
func (r *Reconciler) settledByCache(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment,
	poolName string, refs []capture.Ref) (*poolPlan, bool) {
	_, alloc, blocked, err := r.readPool(ctx, r.Client, poolName, refs)
	if err != nil || blocked != nil {
		return nil, false
	}
	plan := planPool(e, alloc, refs)
	return plan, !plan.needsWrite()
}

// readPool reads a pool through reader and restores its allocator. A
// missing or unusable pool is an outcome for the enactment.
func (r *Reconciler) readPool(ctx context.Context, reader client.Reader, name string,
	refs []capture.Ref) (*ippoolv1.NodeIPPool, *ippool.Allocator, *outcome, error) {
	var pool ippoolv1.NodeIPPool
	if err := reader.Get(ctx, types.NamespacedName{Name: name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			o := failing(ippoolv1.ReasonIPPoolNotFound, fmt.Sprintf("NodeIPPool %q not found: create it, or fix capture %q", name, refs[0].Capture))
			return nil, nil, &o, nil
		}
		return nil, nil, nil, fmt.Errorf("get NodeIPPool %q: %w", name, err)
	}
	rng, err := poolstatus.Range(&pool)
	if err != nil {
		o := failing(ippoolv1.ReasonIPPoolInvalid, fmt.Sprintf("NodeIPPool %q cannot hand out addresses: %v", name, err))
		return nil, nil, &o, nil
	}
	alloc := ippool.NewAllocator(rng)
	if err := alloc.Restore(pool.Status.AllocatedOffsets); err != nil {
		o := pending(ippoolv1.ReasonIPPoolNotAvailable,
			fmt.Sprintf("NodeIPPool %q has an unreadable status (%v); waiting for the pool controller to rebuild it", name, err),
			r.PendingRequeue)
		return nil, nil, &o, nil
	}
	return &pool, alloc, nil, nil
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

// releaseUnclaimed returns the addresses the enactment records but no
// current capture uses (a dropped capture, a capture moved to another pool).
func (r *Reconciler) releaseUnclaimed(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment,
	addresses map[string]capture.Address, captures capture.Captures) error {
	kept := map[string][]string{}
	for _, ref := range captures.Refs {
		kept[ref.Pool] = append(kept[ref.Pool], addresses[ref.Capture].IP.String())
	}
	for pool, held := range e.Status.IPPool {
		var drop []string
		for _, ip := range held.Allocated {
			if !slices.Contains(kept[pool], ip) {
				drop = append(drop, ip)
			}
		}
		if err := r.releaseFromPool(ctx, pool, drop); err != nil {
			return err
		}
	}
	return nil
}

// releaseFromPool clears the bits of ips in a pool, retrying on conflicts.
// Addresses the pool no longer contains, and a pool that is gone, need
// nothing.
func (r *Reconciler) releaseFromPool(ctx context.Context, poolName string, ips []string) error {
	if len(ips) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		var pool ippoolv1.NodeIPPool
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: poolName}, &pool); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("get NodeIPPool %q: %w", poolName, err)
		}
		rng, err := poolstatus.Range(&pool)
		if err != nil {
			return nil // an unusable pool holds nothing
		}
		alloc := ippool.NewAllocator(rng)
		if err := alloc.Restore(pool.Status.AllocatedOffsets); err != nil {
			return nil // the pool controller rebuilds it from the enactments
		}
		if !clearBits(alloc, ips) {
			return nil
		}
		poolstatus.Set(&pool, alloc)
		err = r.Client.Status().Update(ctx, &pool)
		if err == nil {
			ctrl.LoggerFrom(ctx).Info("released addresses", "pool", poolName, "ips", ips, "attempts", attempt)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("write NodeIPPool %q: %w", poolName, err)
		}
		r.Metrics.conflict(poolName)
		if attempt >= r.Backoff.Steps {
			return fmt.Errorf("release from NodeIPPool %q after %d attempts: %w", poolName, attempt, errRetriesExhausted)
		}
		if err := r.sleep(ctx, r.Backoff.delay(attempt)); err != nil {
			return err
		}
	}
}

// clearBits releases ips and reports whether any bit changed.
func clearBits(alloc *ippool.Allocator, ips []string) bool {
	changed := false
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil || !alloc.HasIP(ip) {
			continue
		}
		_ = alloc.ReleaseIP(ip)
		changed = true
	}
	return changed
}

func (r *Reconciler) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.Clock.After(d):
		return nil
	}
}

package pool

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// conflictRequeue is how soon a pool is looked at again after another
// writer changed it under a write of the controller.
const conflictRequeue = 200 * time.Millisecond

// Reconciler reconciles NodeIPPools. Set every exported field; New sets
// them from a manager with defaults.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, for decisions a stale cache
	// could get wrong (rebuilds, garbage collection).
	APIReader client.Reader
	// Pools writes pool statuses and drops enactment records.
	Pools *poolwrite.Writer
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Clock stamps conditions and times unclaimed bits.
	Clock clock.Clock
	// GracePeriod is how long a set bit may stay without a claim before
	// garbage collection frees it, and how long an address may stay in
	// flight before it is revoked (its enactment fenced first, so a late
	// record fails whatever the delay).
	GracePeriod time.Duration
	// QuarantinePeriod is the longest an address taken from its holder stays
	// quarantined when the holder cannot confirm it no longer carries it.
	QuarantinePeriod time.Duration
	// ListNodesFrom is how many quarantined addresses of a pool make a
	// quarantine check list the Nodes once instead of reading each (after
	// a scale-down of hundreds of nodes, one list costs less than hundreds
	// of reads); 0 means DefaultListNodesFrom.
	ListNodesFrom int
	// Metrics exports per-pool gauges and counters; nil exports nothing.
	Metrics *Metrics
	// Batch is how long the events of pools and enactments are gathered
	// into one reconcile of a pool.
	Batch time.Duration

	mu     sync.Mutex
	memory map[string]*poolMemory
}

// poolMemory is what the controller remembers of one pool between
// reconciles. The workqueue hands a pool to one reconcile at a time, so a
// poolMemory is never used concurrently.
type poolMemory struct {
	uid types.UID
	// rebuilt is set once a rebuild by this process has finished, and
	// cleared when another starts.
	rebuilt bool
	// refused is set while this process refuses the pool (overlapping or
	// invalid); the pool is rebuilt once it is no longer refused.
	refused   bool
	unclaimed unclaimedBits
	// lastPrune is when recorded in-flight entries were last removed, and
	// lastLiftCheck when quarantines were last looked at.
	lastPrune, lastLiftCheck time.Time
	// nudged holds, by enactment, why it was last nudged (see toNudge).
	nudged map[string]string
}

// Reconcile rebuilds a pool when it must (new, controller start, reset,
// index broken), and otherwise keeps its Available condition current and
// collects unclaimed bits. A conflict means another writer changed the pool
// first: the pool is looked at again with that change.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("pool", req.Name))
	var pool ippoolv1.NodeIPPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	r.Metrics.observe(&pool)
	res, err := r.reconcile(ctx, &pool)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, pool *ippoolv1.NodeIPPool) (ctrl.Result, error) {
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return ctrl.Result{}, r.refuse(ctx, pool, refused(ippoolv1.ReasonInvalidIPPool,
			fmt.Sprintf("The range cannot hand out addresses: %v; re-create the pool with a usable range", err)))
	}
	other, err := r.olderOverlapping(ctx, pool, rng)
	if err != nil {
		return ctrl.Result{}, err
	}
	if other != "" {
		return ctrl.Result{}, r.refuse(ctx, pool, refused(ippoolv1.ReasonOverlappingIPPool,
			fmt.Sprintf("The NodeIPPool %s is overlapping with this one; delete this pool or re-create it with a range outside %s's", other, other)))
	}
	enactments, err := r.enactments(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	alloc := ippool.NewAllocator(rng)
	unreadable := alloc.Restore(pool.Status.AllocatedOffsets)
	v := observe(pool.Name, alloc, enactments)
	rs, err := r.resetsOf(ctx, pool, enactments)
	if err != nil {
		return ctrl.Result{}, err
	}
	why, err := r.rebuildReason(ctx, pool, v, rs, unreadable)
	if err != nil {
		return ctrl.Result{}, err
	}
	if why != "" {
		return ctrl.Result{}, r.rebuild(ctx, pool, rs, why)
	}
	return r.maintain(ctx, pool, alloc, v)
}

// refuse marks the pool unavailable for a; it is rebuilt once it is no
// longer refused.
func (r *Reconciler) refuse(ctx context.Context, pool *ippoolv1.NodeIPPool, a availability) error {
	r.remember(pool).refused = true
	return r.setAvailable(ctx, pool, a)
}

// maintain keeps a pool that serves up to date: it prunes recorded
// in-flight entries, revokes stale ones, lifts quarantines, frees bits
// unclaimed for longer than the grace period, or else writes the Available
// condition if it changed, and comes back when the next of those falls due.
func (r *Reconciler) maintain(ctx context.Context, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, v view) (ctrl.Result, error) {
	m := r.remember(pool)
	gcDue, gcNext := m.unclaimed.observe(withoutEntries(pool, alloc, v.audit.Unclaimed), r.Clock.Now(), r.GracePeriod)
	holdsDue, holdsNext := r.entriesDue(pool, v.claims, existing(v.enactments), m)
	result := ctrl.Result{RequeueAfter: soonest(gcNext, holdsNext)}
	// Waiting nodes first: serving them is what a rollout waits for.
	if err := r.serve(ctx, pool, v); err != nil {
		return result, err
	}
	if len(gcDue) > 0 || holdsDue {
		return result, r.collect(ctx, pool, gcDue, holdsDue)
	}
	if err := r.setAvailable(ctx, pool, availabilityOf(pool.Name, alloc, v)); err != nil {
		return result, err
	}
	if err := r.setReservations(ctx, pool, alloc, v); err != nil {
		return result, err
	}
	r.nudge(ctx, pool, v)
	return result, nil
}

// soonest returns the shorter positive duration, or 0 if neither is.
func soonest(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// olderOverlapping returns the oldest older pool overlapping pool, or "".
func (r *Reconciler) olderOverlapping(ctx context.Context, pool *ippoolv1.NodeIPPool, rng *ippool.Range) (string, error) {
	var pools ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return "", fmt.Errorf("list pools: %w", err)
	}
	return olderOverlapping(pool, rng, pools.Items), nil
}

// enactments lists every enactment from the cache: a pool's claims are
// the records of any pool name whose address lies in its range.
func (r *Reconciler) enactments(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	// Every event of a thousand enactments brings the pool back: the items
	// are the cache's own, not copies. Never change them; copy one first.
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	return list.Items, nil
}

// statusChange computes, on a fresh copy of a pool read from the API
// server, its Available condition, changes its bitmap, and reports whether
// the bitmap changed.
type statusChange func(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (availability, bool, error)

// writeStatus writes the bitmap, entries, counts and Available condition
// of a pool through the pool writer, in one status write guarded by its
// resourceVersion and UID (retried on conflicts), updates pool to what was
// written, and raises an Event if the condition transitioned.
func (r *Reconciler) writeStatus(ctx context.Context, pool *ippoolv1.NodeIPPool, change statusChange, opts ...poolwrite.Option) error {
	var (
		want         availability
		transitioned bool
		written      *ippoolv1.NodeIPPool
	)
	opts = append(opts, poolwrite.Incarnation(pool.UID))
	_, err := r.Pools.Update(ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		a, bitmapChanged, err := change(p, alloc)
		if err != nil {
			return false, err
		}
		var condChanged bool
		want, written = a, p
		condChanged, transitioned = setAvailability(p, a, r.Clock.Now())
		return bitmapChanged || condChanged, nil
	}, opts...)
	if err != nil {
		return err
	}
	if written != nil {
		written.DeepCopyInto(pool)
	}
	if transitioned {
		r.announce(ctx, pool, ippoolv1.ConditionAvailable, want)
	}
	return nil
}

// setAvailable writes the Available condition alone, if it changed, through
// the pool writer; the cached copy tells whether it may have. It writes
// also on a pool whose range or bitmap cannot be used.
func (r *Reconciler) setAvailable(ctx context.Context, pool *ippoolv1.NodeIPPool, a availability) error {
	return r.writeCondition(ctx, pool, ippoolv1.ConditionAvailable, a, setAvailability)
}

// conditionSetter sets one condition of a pool to a, as setCondition
// does, and reports whether anything changed and whether it transitioned.
type conditionSetter func(pool *ippoolv1.NodeIPPool, a availability, now time.Time) (changed, transitioned bool)

// writeCondition writes the condition of type t alone, if set changes it,
// through the pool writer: the cached copy tells whether it may have, the
// latest copy decides. It updates pool to what was written and announces a
// transition.
func (r *Reconciler) writeCondition(ctx context.Context, pool *ippoolv1.NodeIPPool, t string, a availability, set conditionSetter) error {
	if changed, _ := set(pool.DeepCopy(), a, r.Clock.Now()); !changed {
		return nil
	}
	var transitioned bool
	written, err := r.Pools.UpdateConditions(ctx, pool.Name, func(p *ippoolv1.NodeIPPool) bool {
		var changed bool
		changed, transitioned = set(p, a, r.Clock.Now())
		return changed
	}, poolwrite.Incarnation(pool.UID))
	if err != nil || written == nil {
		return err
	}
	written.DeepCopyInto(pool)
	if transitioned {
		r.announce(ctx, pool, t, a)
	}
	return nil
}

// announce logs a transition of a pool condition and raises an Event, a
// Warning when the condition is False.
func (r *Reconciler) announce(ctx context.Context, pool *ippoolv1.NodeIPPool, condition string, a availability) {
	ctrl.LoggerFrom(ctx).Info("pool condition changed", "type", condition, "status", a.status, "reason", a.reason, "message", a.message)
	eventType := corev1.EventTypeNormal
	if a.status == metav1.ConditionFalse {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(pool, nil, eventType, a.reason, "Reconcile", "%s", a.message)
}

// remember returns the controller's memory of pool, new if the pool was
// re-created.
func (r *Reconciler) remember(pool *ippoolv1.NodeIPPool) *poolMemory {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memory == nil {
		r.memory = map[string]*poolMemory{}
	}
	m, ok := r.memory[pool.Name]
	if !ok || m.uid != pool.UID {
		m = &poolMemory{uid: pool.UID}
		r.memory[pool.Name] = m
	}
	return m
}

// forget drops what the controller remembers of a deleted pool.
func (r *Reconciler) forget(name string) {
	r.mu.Lock()
	delete(r.memory, name)
	r.mu.Unlock()
	r.Metrics.forget(name)
}

func conditionOf(pool *ippoolv1.NodeIPPool) *metav1.Condition {
	return meta.FindStatusCondition(pool.Status.Conditions, ippoolv1.ConditionAvailable)
}

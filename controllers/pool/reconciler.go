package pool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
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
	// QuarantinePeriod is how long a quarantine may last before it is
	// reported overdue (ReleasesConfirmed=False); it never frees an address.
	// A tenth of it spaces the requests for the holder's state; it is also
	// how long an address is kept for its holder's return, and it caps
	// DepartureHold.
	QuarantinePeriod time.Duration
	// DepartureHold is how long the addresses of a deleted Node stay
	// quarantined before they are free (at most QuarantinePeriod): the
	// Node gone is the evidence, the hold gives a machine that still runs
	// time to take them off.
	DepartureHold time.Duration
	// ListNodesFrom is how many quarantined addresses of a pool make a
	// quarantine check list the Nodes once instead of reading each (after
	// a scale-down of hundreds of nodes, one list costs less than hundreds
	// of reads); 0 means DefaultListNodesFrom.
	ListNodesFrom int
	// ListStatesFrom is how many nodes whose NodeNetworkStates a
	// quarantine check must read make it list every state once instead
	// (a list decodes every node's state); 0 means DefaultListStatesFrom.
	ListStatesFrom int
	// PruneAfter is how long a recorded address keeps its in-flight
	// entry before the controller removes it; 0 means DefaultPruneAfter.
	PruneAfter time.Duration
	// Metrics exports per-pool gauges and counters; nil exports nothing.
	Metrics *Metrics
	// Batch is how long the events of pools and enactments are gathered
	// into one reconcile of a pool.
	Batch time.Duration
	// IPAMVersion is the version of the Cluster API IPAM group the API
	// server serves (capi.Served), whose IPAddresses are the records of
	// the claims pools serve; "" when its CRDs are not installed: no claim
	// holds an address then.
	IPAMVersion string
	// Signer tells the IPAddresses the claim controller made (capi.Signer)
	// from any other, which hold no address as records do and are reported
	// (ConditionIPAddressesRecognized); nil counts every one.
	Signer *capi.Signer
	// PooledPolicies is set when the API server serves companion mode's
	// PooledNodeNetworkConfigurationPolicy, whose status.nodes are records
	// of addresses too (holder.OfPolicyNode).
	PooledPolicies bool
	// ServeEnactments serves the enactments that ask for an address
	// (handler mode: their handlers may not write pools). Beside
	// kubernetes-nmstate's handler (companion mode) no enactment is ours
	// to serve and kubernetes-nmstate's are never written, so none is,
	// whatever its annotations say; nor is its policy read whole.
	ServeEnactments bool
	// HoldCarried quarantines, for the node that carries it, each free
	// address of a pool that a node's published state shows and no
	// holder records (strayHolder): what handlers run with
	// --self-allocate, which do not look at what other nodes carry when
	// they take a new address, need.
	HoldCarried bool
	// Carried tells what every node's network carries, which an address
	// served to a node avoids (carriers.Watch); nil lists the states from
	// the API server for every serve. SetupWithManager watches them when
	// the controller serves enactments.
	Carried *carriers.Carriers

	mu     sync.Mutex
	memory map[string]*poolMemory
}

// The controller's work on a pool falls into three concerns, each a type of
// its own over the Reconciler's clients and settings:
//   - rebuilder (rebuild.go) rebuilds a pool's status from the records of
//     its holders: a new pool, a controller start, a reset, a broken index;
//   - server (serve.go, adopt.go, nudge.go) serves the holders that wait for
//     an address, and nudges those that should look again;
//   - maintainer (maintain.go, holds.go, quarantine.go) keeps what is held:
//     garbage collection, in-flight entries, quarantines and kept
//     addresses, reservations, the conditions of a maintenance pass, and
//     the release of a pool being deleted.
//
// The Reconciler decides which runs (reconcile, pass) and keeps what they
// share: the holders' records, the status writes, each pool's memory.
type (
	rebuilder  struct{ *Reconciler }
	server     struct{ *Reconciler }
	maintainer struct{ *Reconciler }
)

// poolMemory is what the controller remembers of one pool between
// reconciles. The workqueue hands a pool to one reconcile at a time, so a
// poolMemory is never used concurrently.
type poolMemory struct {
	uid         types.UID
	rebuild     rebuildMemory
	maintenance maintenanceMemory
	serving     servingMemory
}

// rebuildMemory is what the rebuilder remembers of a pool.
type rebuildMemory struct {
	// rebuilt is set once a rebuild by this process has finished, and
	// cleared when another starts.
	rebuilt bool
	// refused is set while this process refuses the pool (overlapping or
	// invalid); the pool is rebuilt once it is no longer refused.
	refused bool
}

// maintenanceMemory is what the maintainer remembers of a pool: its
// clocks, on this process's clock.
type maintenanceMemory struct {
	// unclaimed and inFlight time the set bits nobody claims and the
	// in-flight entries.
	unclaimed sightings[uint64]
	inFlight  sightings[string]
	// lastLiftCheck is when quarantines were last looked at, and
	// stateChanged is set when a quarantined address's holder published a
	// new state since: the quarantines are looked at again at once.
	lastLiftCheck time.Time
	stateChanged  atomic.Bool
	// reservedCarriers are the nodes whose networks carried an address
	// reserved for another node at the last maintenance pass (read by the
	// watch's handlers): a new state of theirs may change
	// ReservationsHonored.
	reservedCarriers atomic.Pointer[map[string]bool]
}

// servingMemory is what the server remembers of a pool.
type servingMemory struct {
	// nudged holds, by enactment, why it was last nudged (see toNudge).
	nudged map[string]string
	// waitsOnCarried is set while a node waits because the only free
	// addresses are carried by other nodes' networks: any node's new
	// state may free one, and is read by the watch's handlers.
	waitsOnCarried atomic.Bool
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
	err := r.ensureFinalizer(ctx, &pool)
	res := ctrl.Result{}
	if err == nil {
		r.Metrics.report(&pool)
		res, err = r.reconcile(ctx, &pool)
	}
	if apierrors.IsConflict(err) {
		// Not a failure: a pool that busy handlers write many times a
		// second would otherwise climb the workqueue's exponential
		// backoff and wait minutes for its next look.
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	}
	return res, err
}

// ensureFinalizer adds FinalizerPoolEntries to a pool that is not being
// deleted. The patch is guarded by the resourceVersion (a merge patch
// replaces the whole list, so it must not drop another's finalizer);
// handlers writing the pool's status change that version many times a
// second, so a conflict reads the pool again from the API server and
// retries, as every guarded pool write does. pool is updated to what was
// written.
func (r *Reconciler) ensureFinalizer(ctx context.Context, pool *ippoolv1.NodeIPPool) error {
	latest := pool
	keep := func() {
		if latest != pool { // DeepCopyInto onto itself would empty its slices
			latest.DeepCopyInto(pool)
		}
	}
	return r.Pools.Retry(ctx, func() error {
		if latest == nil {
			latest = &ippoolv1.NodeIPPool{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pool), latest); err != nil {
				return client.IgnoreNotFound(err)
			}
			if latest.UID != pool.UID {
				return nil // re-created: its own reconcile adds the finalizer
			}
		}
		if !latest.DeletionTimestamp.IsZero() || slices.Contains(latest.Finalizers, ippoolv1.FinalizerPoolEntries) {
			keep()
			return nil
		}
		patch := client.MergeFromWithOptions(latest.DeepCopy(), client.MergeFromWithOptimisticLock{})
		latest.Finalizers = append(latest.Finalizers, ippoolv1.FinalizerPoolEntries)
		err := r.Client.Patch(ctx, latest, patch)
		switch {
		case apierrors.IsConflict(err):
			latest = nil
			return err
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("add finalizer %s to NodeIPPool %q: %w", ippoolv1.FinalizerPoolEntries, pool.Name, err)
		case err == nil:
			keep()
		}
		return nil
	})
}

func (r *Reconciler) reconcile(ctx context.Context, pool *ippoolv1.NodeIPPool) (ctrl.Result, error) {
	if !pool.DeletionTimestamp.IsZero() {
		return r.finish(ctx, pool)
	}
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return ctrl.Result{}, r.refuse(ctx, pool, refused(ippoolv1.ReasonInvalidIPPool,
			fmt.Sprintf("The range cannot hand out addresses: %v; fix spec.range's start, end or exclude in place, or re-create the pool if its cidr is wrong", err)))
	}
	other, err := r.olderOverlapping(ctx, pool, rng)
	if err != nil {
		return ctrl.Result{}, err
	}
	if other != "" {
		return ctrl.Result{}, r.refuse(ctx, pool, refused(ippoolv1.ReasonOverlappingIPPool,
			fmt.Sprintf("The NodeIPPool %s is overlapping with this one; move this pool's start and end in place outside %s's range, or delete this pool", other, other)))
	}
	hs, err := r.holdings(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	alloc := ippool.NewAllocator(rng)
	unreadable := alloc.Restore(pool.Status.AllocatedOffsets)
	v := viewOf(pool.Name, alloc, hs)
	r.Metrics.waitingEnactments(pool.Name, v.waitingNames)
	rb := rebuilder{r}
	rs, err := rb.resetsOf(ctx, pool, hs.enactments)
	if err != nil {
		return ctrl.Result{}, err
	}
	why, err := rb.rebuildReason(ctx, pool, v, rs, unreadable)
	if err == nil && why != "" {
		err = rb.rebuild(ctx, pool, rs, why)
	}
	if err != nil || why != "" {
		if failed(ctx, err) {
			r.Metrics.rebuildFailed(pool.Name)
		}
		return ctrl.Result{}, err
	}
	return r.pass(ctx, pool, alloc, v)
}

// pass keeps a pool up to date: it serves waiting holders (server), then,
// in one status write, prunes recorded in-flight entries, revokes stale
// ones, lifts quarantines on evidence, collects bits unclaimed for longer
// than the grace period, and sets the Available, ReservationsHonored and
// ReleasesConfirmed conditions; it asks holders for evidence, nudges the
// enactments that should look again, and comes back when the next of
// those falls due. A pool being deleted serves nothing, revokes what is in
// flight, and loses its finalizer once no entry is left.
func (r *Reconciler) pass(ctx context.Context, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, v view) (ctrl.Result, error) {
	m := r.remember(pool)
	mt, sv := maintainer{r}, server{r}
	now := r.Clock.Now()
	gcDue, gcNext := dueOffsets(m.maintenance.unclaimed.see(withoutEntries(pool, alloc, v.audit.Unclaimed), now), r.GracePeriod)
	holdsDue, holdsNext := mt.holdsDue(pool, v.owners, existing(v.holdings), m)
	result := ctrl.Result{RequeueAfter: soonest(gcNext, holdsNext)}
	terminating := !pool.DeletionTimestamp.IsZero()
	// served is serving's error, returned once maintenance is done: an
	// error in serving some nodes holds up no collection, no lifting of a
	// quarantine (which may be what clears it).
	var served error
	if !terminating && r.ServeEnactments {
		// Waiting nodes first: serving them is what a rollout waits for.
		var again time.Duration
		again, served = sv.serve(ctx, pool, alloc, v)
		result.RequeueAfter = soonest(result.RequeueAfter, again)
	}
	mw, err := mt.planMaintenance(ctx, pool, v, gcDue, holdsDue, m)
	if err == nil {
		err = mt.writeMaintenance(ctx, pool, mw)
	}
	if err != nil {
		if (len(gcDue) > 0 || holdsDue) && failed(ctx, err) {
			r.Metrics.collectionFailed(pool.Name)
		}
		return ctrl.Result{}, err
	}
	mt.askForStates(ctx, mw.holds.ask)
	if terminating {
		if err := mt.release(ctx, pool); err != nil {
			return ctrl.Result{}, err
		}
		return result, nil
	}
	if r.ServeEnactments {
		sv.nudge(ctx, pool, v)
	}
	if served != nil {
		return ctrl.Result{}, served
	}
	return result, nil
}

// failed reports whether err is a failure the metrics count: not a
// conflict (the work is done again on the fresh pool), not the end of
// this process's turn (its context cancelled), not the pool deleted or
// replaced meanwhile.
func failed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) && !poolwrite.Gone(err)
}

// refuse marks the pool unavailable for a; it is rebuilt once it is no
// longer refused.
func (r *Reconciler) refuse(ctx context.Context, pool *ippoolv1.NodeIPPool, a availability) error {
	r.remember(pool).rebuild.refused = true
	r.Metrics.waitingEnactments(pool.Name, nil) // they wait on a pool that serves nobody: its condition says so
	return r.setAvailable(ctx, pool, a)
}

// finish looks after a pool being deleted: it hands out nothing, revokes
// what is in flight, lifts quarantines on evidence, and lets the pool go
// once no entry is left (see pass). A pool whose range or bitmap
// cannot be read could hand nothing out: it goes at once.
func (r *Reconciler) finish(ctx context.Context, pool *ippoolv1.NodeIPPool) (ctrl.Result, error) {
	r.Metrics.waitingEnactments(pool.Name, nil) // nothing waits on a pool being deleted: it serves nobody
	alloc, err := poolstatus.Allocator(pool)
	if err != nil {
		return ctrl.Result{}, removeFinalizer(ctx, r.Client, pool, ippoolv1.FinalizerPoolEntries)
	}
	hs, err := r.holdings(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.pass(ctx, pool, alloc, viewOf(pool.Name, alloc, hs))
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

// statusChange computes, on a fresh copy of a pool read from the API
// server, the conditions to set, changes its bitmap and entries, and
// reports whether they changed.
type statusChange func(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (conditionSet, bool, error)

// writeStatus writes the bitmap, entries, counts and conditions of a pool
// through the pool writer, in one status write guarded by its
// resourceVersion and UID (retried on conflicts), updates pool to what was
// written, and raises an Event for each condition that transitioned.
func (r *Reconciler) writeStatus(ctx context.Context, pool *ippoolv1.NodeIPPool, change statusChange, opts ...poolwrite.Option) error {
	var (
		want         conditionSet
		transitioned []string
		written      *ippoolv1.NodeIPPool
	)
	opts = append(opts, poolwrite.Incarnation(pool.UID))
	_, err := r.Pools.Update(ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		conds, changed, err := change(p, alloc)
		if err != nil {
			return false, err
		}
		var condChanged bool
		want, written = conds, p
		condChanged, transitioned = conds.set(p, r.Clock.Now())
		return changed || condChanged, nil
	}, opts...)
	if err != nil {
		return err
	}
	if written != nil {
		written.DeepCopyInto(pool)
	}
	for _, t := range transitioned {
		r.announce(ctx, pool, t, want[t])
	}
	return nil
}

// setAvailable writes the Available condition alone, if it changed, through
// the pool writer: the cached copy tells whether it may have, the latest
// copy decides. It writes also on a pool whose range or bitmap cannot be
// used. It updates pool to what was written and announces a transition.
func (r *Reconciler) setAvailable(ctx context.Context, pool *ippoolv1.NodeIPPool, a availability) error {
	conds := conditionSet{ippoolv1.ConditionAvailable: a}
	if changed, _ := conds.set(pool.DeepCopy(), r.Clock.Now()); !changed {
		return nil
	}
	var transitioned []string
	written, err := r.Pools.UpdateConditions(ctx, pool.Name, func(p *ippoolv1.NodeIPPool) bool {
		var changed bool
		changed, transitioned = conds.set(p, r.Clock.Now())
		return changed
	}, poolwrite.Incarnation(pool.UID))
	if err != nil || written == nil {
		return err
	}
	written.DeepCopyInto(pool)
	for _, t := range transitioned {
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

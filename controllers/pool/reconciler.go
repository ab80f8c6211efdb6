package pool

import (
	"context"
	"fmt"
	"strings"
	"sync"

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
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Reconciler reconciles NodeIPPools. Set every exported field.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, for rebuilds.
	APIReader client.Reader
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Clock stamps conditions.
	Clock clock.PassiveClock

	mu      sync.Mutex
	rebuilt map[types.UID]bool // pools rebuilt since this process started
}

// Reconcile decides whether the pool may serve handlers, rebuilding it
// first when it is new, when this controller has just started, or when an
// admin asked for it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("pool", req.Name))
	var pool ippoolv1.NodeIPPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	rng, err := poolstatus.Range(&pool)
	if err != nil {
		return ctrl.Result{}, r.setAvailable(ctx, &pool, metav1.ConditionFalse, ippoolv1.ReasonInvalidIPPool,
			fmt.Sprintf("The range cannot hand out addresses: %v; re-create the pool with a usable range", err))
	}
	var pools ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pools: %w", err)
	}
	if other := olderOverlapping(&pool, rng, pools.Items); other != "" {
		return ctrl.Result{}, r.setAvailable(ctx, &pool, metav1.ConditionFalse, ippoolv1.ReasonOverlappingIPPool,
			fmt.Sprintf("The NodeIPPool %s is overlapping with this one; delete this pool or re-create it with a range outside %s's", other, other))
	}
	if r.needsRebuild(&pool) {
		return ctrl.Result{}, r.rebuild(ctx, &pool, rng)
	}
	return ctrl.Result{}, r.checkCollisions(ctx, &pool)
}

func (r *Reconciler) needsRebuild(pool *ippoolv1.NodeIPPool) bool {
	if _, reset := pool.Annotations[ippoolv1.ResetIPPoolAnnotation]; reset {
		return true
	}
	c := meta.FindStatusCondition(pool.Status.Conditions, ippoolv1.ConditionAvailable)
	if c == nil || c.Reason == ippoolv1.ReasonReconcilingPool || c.Reason == ippoolv1.ReasonOverlappingIPPool ||
		c.Reason == ippoolv1.ReasonUnsyncronizedIPPool || c.Reason == ippoolv1.ReasonInvalidIPPool {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.rebuilt[pool.UID]
}

// rebuild stops allocation, sets every claimed bit, reports collisions, and
// opens the pool again.
func (r *Reconciler) rebuild(ctx context.Context, pool *ippoolv1.NodeIPPool, rng *ippool.Range) error {
	log := ctrl.LoggerFrom(ctx)
	if err := r.setAvailable(ctx, pool, metav1.ConditionUnknown, ippoolv1.ReasonReconcilingPool, "The pool is being updated"); err != nil {
		return err
	}
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &enactments); err != nil {
		_ = r.setAvailable(ctx, pool, metav1.ConditionFalse, ippoolv1.ReasonUnsyncronizedIPPool,
			fmt.Sprintf("Failed re constructing the IP pool, it may be not in sync with nodes: %v", err))
		return fmt.Errorf("list enactments: %w", err)
	}
	var fresh ippoolv1.NodeIPPool
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: pool.Name}, &fresh); err != nil {
		return fmt.Errorf("get pool: %w", err)
	}
	alloc := ippool.NewAllocator(rng)
	if err := alloc.Restore(fresh.Status.AllocatedOffsets); err != nil {
		// The index is unreadable; the enactments are the record.
		log.Info("discarded an unreadable bitmap", "error", err.Error())
		r.Recorder.Eventf(&fresh, nil, corev1.EventTypeWarning, ippoolv1.ReasonUnsyncronizedIPPool, "Rebuild",
			"Discarded an unreadable status.allocatedOffsets (%v); rebuilding from the enactments", err)
	}
	res := rebuild(alloc, claimsOf(pool.Name, enactments.Items))
	poolstatus.Set(&fresh, alloc)
	status, reason, msg := metav1.ConditionTrue, ippoolv1.ReasonReconciledPool, "The pool is up to date"
	if len(res.collisions) > 0 {
		status, reason, msg = metav1.ConditionFalse, ippoolv1.ReasonIPCollision, collisionMessage(res.collisions)
	}
	r.setCondition(&fresh, status, reason, msg)
	if err := r.Client.Status().Update(ctx, &fresh); err != nil {
		return fmt.Errorf("write the rebuilt pool: %w", err)
	}
	if len(res.outside) > 0 {
		r.Recorder.Eventf(&fresh, nil, corev1.EventTypeWarning, "AddressOutsideRange", "Rebuild",
			"Enactments hold addresses this range no longer hands out; their handlers allocate again: %s", strings.Join(res.outside, "; "))
	}
	log.Info("rebuilt pool", "set", res.set, "allocated", fresh.Status.Allocated, "collisions", len(res.collisions), "outside", len(res.outside))
	if err := r.clearResetAnnotation(ctx, &fresh); err != nil {
		return err
	}
	r.mu.Lock()
	if r.rebuilt == nil {
		r.rebuilt = map[types.UID]bool{}
	}
	r.rebuilt[pool.UID] = true
	r.mu.Unlock()
	return nil
}

// checkCollisions keeps the IPCollision condition in step with the
// enactments between rebuilds.
func (r *Reconciler) checkCollisions(ctx context.Context, pool *ippoolv1.NodeIPPool) error {
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.Client.List(ctx, &enactments); err != nil {
		return fmt.Errorf("list enactments: %w", err)
	}
	var collisions []string
	for ip, owners := range claimsOf(pool.Name, enactments.Items) {
		if len(owners) > 1 {
			collisions = append(collisions, fmt.Sprintf("%s is held by %s", ip, strings.Join(owners, " and ")))
		}
	}
	if len(collisions) > 0 {
		return r.setAvailable(ctx, pool, metav1.ConditionFalse, ippoolv1.ReasonIPCollision, collisionMessage(collisions))
	}
	return r.setAvailable(ctx, pool, metav1.ConditionTrue, ippoolv1.ReasonReconciledPool, "The pool is up to date")
}

func collisionMessage(collisions []string) string {
	return "IP collision: " + strings.Join(collisions, "; ") + "; fix or reset the enactments involved"
}

// setAvailable writes the Available condition if it changes, with an Event
// on every transition.
func (r *Reconciler) setAvailable(ctx context.Context, pool *ippoolv1.NodeIPPool, status metav1.ConditionStatus, reason, msg string) error {
	old := meta.FindStatusCondition(pool.Status.Conditions, ippoolv1.ConditionAvailable)
	if old != nil && old.Status == status && old.Reason == reason && old.Message == msg {
		return nil
	}
	r.setCondition(pool, status, reason, msg)
	if err := r.Client.Status().Update(ctx, pool); err != nil {
		return fmt.Errorf("write the Available condition: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("pool availability changed", "status", status, "reason", reason, "message", msg)
	return nil
}

func (r *Reconciler) setCondition(pool *ippoolv1.NodeIPPool, status metav1.ConditionStatus, reason, msg string) {
	old := meta.FindStatusCondition(pool.Status.Conditions, ippoolv1.ConditionAvailable)
	changed := old == nil || old.Status != status || old.Reason != reason
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: pool.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())})
	pool.Status.ObservedGeneration = pool.Generation
	if changed {
		eventType := corev1.EventTypeNormal
		if status == metav1.ConditionFalse {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(pool, nil, eventType, reason, "Reconcile", msg)
	}
}

// clearResetAnnotation removes nmstate.io/reset-ippool once the rebuild is
// written.
func (r *Reconciler) clearResetAnnotation(ctx context.Context, pool *ippoolv1.NodeIPPool) error {
	if _, ok := pool.Annotations[ippoolv1.ResetIPPoolAnnotation]; !ok {
		return nil
	}
	patch := client.MergeFrom(pool.DeepCopy())
	delete(pool.Annotations, ippoolv1.ResetIPPoolAnnotation)
	if err := r.Client.Patch(ctx, pool, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the %s annotation: %w", ippoolv1.ResetIPPoolAnnotation, err)
	}
	ctrl.LoggerFrom(ctx).Info("reset pool", "annotation", ippoolv1.ResetIPPoolAnnotation)
	return nil
}

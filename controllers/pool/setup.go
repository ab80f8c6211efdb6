package pool

import (
	"context"
	"fmt"
	"slices"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
)

// DefaultGracePeriod is how long a bit may stay unclaimed before garbage
// collection frees it.
const DefaultGracePeriod = 2 * time.Minute

// poolIndex indexes enactments by the pools they concern (see
// poolsOfEnactment).
const poolIndex = "nmstate-ippool.pools"

// New returns a Reconciler wired to the manager, with the default clock,
// backoff and grace period; callers may change any field before
// SetupWithManager.
func New(mgr ctrl.Manager, metrics *Metrics) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Pools:       poolwrite.NewWriter(mgr.GetAPIReader(), mgr.GetClient(), clk),
		Recorder:    mgr.GetEventRecorder("nmstate-ippool-pool-controller"),
		Clock:       clk,
		GracePeriod: DefaultGracePeriod,
		Metrics:     metrics,
	}
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several controllers in one process (tests);
	// controller names are otherwise process-unique.
	SkipNameValidation bool
}

// SetupWithManager indexes enactments by pool and registers the
// controller: pools, the enactments that concern them, the creation or
// deletion of any pool (which may start or end an overlap), and reset
// annotations on policies.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts SetupOptions) error {
	err := mgr.GetFieldIndexer().IndexField(ctx, &nncev1beta1.NodeNetworkConfigurationEnactment{}, poolIndex,
		poolsOfEnactment)
	if err != nil {
		return fmt.Errorf("index enactments by pool: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeippool").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation)}).
		For(&ippoolv1.NodeIPPool{}).
		Watches(&ippoolv1.NodeIPPool{}, handler.EnqueueRequestsFromMapFunc(r.allPools),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, handler.EnqueueRequestsFromMapFunc(requestsFor(poolsOfEnactment))).
		Watches(&nmstatev1.NodeNetworkConfigurationPolicy{}, handler.EnqueueRequestsFromMapFunc(requestsFor(resetPool))).
		Complete(r)
}

func (r *Reconciler) allPools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pools.Items))
	for _, p := range pools.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return reqs
}

// requestsFor turns a function naming pools into a map function.
func requestsFor(pools func(client.Object) []string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		for _, p := range pools(o) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p}})
		}
		return reqs
	}
}

// poolsOfEnactment names the pools an enactment concerns: those it records
// addresses of, the one it waits on for want of an address, and the one its
// reset annotation names.
func poolsOfEnactment(o client.Object) []string {
	e, ok := o.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	if !ok {
		return nil
	}
	var pools []string
	for pool := range e.Status.IPPool {
		pools = append(pools, pool)
	}
	if pool := exhaustedPool(e); pool != "" {
		pools = append(pools, pool)
	}
	pools = append(pools, resetPool(e)...)
	slices.Sort(pools)
	return slices.Compact(pools)
}

// resetPool names the pool an object's reset annotation names, if any.
func resetPool(o client.Object) []string {
	if pool := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]; pool != "" {
		return []string{pool}
	}
	return nil
}

// The pool controller's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Leader election needs leases in the controller's namespace only:
// deploy/rbac/pool-controller/leader-election.yaml grants them.

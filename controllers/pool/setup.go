package pool

import (
	"context"

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
)

// New returns a Reconciler wired to the manager.
func New(mgr ctrl.Manager) *Reconciler {
	return &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("nmstate-ippool-pool-controller"),
		Clock:     clock.RealClock{},
	}
}

// SetupWithManager registers the controller: pools, the enactments that
// claim from them, and the creation or deletion of any pool (which may end
// or start an overlap).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeippool").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(skipNameValidation)}).
		For(&ippoolv1.NodeIPPool{}).
		Watches(&ippoolv1.NodeIPPool{}, handler.EnqueueRequestsFromMapFunc(r.allPools),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, handler.EnqueueRequestsFromMapFunc(poolsOfEnactment)).
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

func poolsOfEnactment(_ context.Context, o client.Object) []reconcile.Request {
	e, ok := o.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for pool := range e.Status.IPPool {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: pool}})
	}
	return reqs
}

// The pool controller's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

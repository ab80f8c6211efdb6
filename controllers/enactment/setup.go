package enactment

import (
	"context"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
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
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
)

// FieldOwner is the field manager of every write of the enactment controller (of the pool controller's process): the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-enactment-controller"

// New returns a Reconciler wired to the manager.
func New(mgr ctrl.Manager) *Reconciler {
	return &Reconciler{
		Client:    client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		APIReader: mgr.GetAPIReader(),
		Pools:     poolwrite.ForManager(mgr, clock.RealClock{}, "nmstate-ippool-pool-controller"),
		Recorder:  eventnote.New(mgr.GetEventRecorder("nmstate-ippool-pool-controller")),
	}
}

// concurrentRetires is how many enactments are looked at at once. When
// many nodes are removed together their retires overlap, and the pool
// writer puts their quarantines in shared pool writes. Retire is safe
// against any number of concurrent retirers of one enactment.
const concurrentRetires = 8

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
}

// SetupWithManager registers the controller: enactments, the deletion of
// Nodes and policies, and reset annotations on policies.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nnce-cleanup").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues(), MaxConcurrentReconciles: concurrentRetires}).
		For(&nncev1beta1.NodeNetworkConfigurationEnactment{}).
		WatchesMetadata(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.enactmentsLabelled(shared.EnactmentNodeLabel)),
			builder.WithPredicates(deletions())).
		Watches(&nmstatev1.NodeNetworkConfigurationPolicy{}, handler.EnqueueRequestsFromMapFunc(r.enactmentsLabelled(shared.EnactmentPolicyLabel)),
			builder.WithPredicates(predicate.Or(deletions(), resetAnnotated()))).
		Complete(r)
}

// enactmentsLabelled maps an object to the enactments whose label names it.
func (r *Reconciler) enactmentsLabelled(label string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list nncev1beta1.NodeNetworkConfigurationEnactmentList
		if err := r.Client.List(ctx, &list, client.MatchingLabels{label: o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, e := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
		}
		return reqs
	}
}

func deletions() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
	}
}

// resetAnnotated passes objects that carry a reset annotation.
func resetAnnotated() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]
		return ok
	})
}

// The enactment controller's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch;delete;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

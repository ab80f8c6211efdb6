package policy

import (
	"context"
	"maps"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/batch"
)

// policyIndex indexes enactments by the policy they enact.
const policyIndex = "enactment.policy"

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
}

// SetupWithManager registers the controller: policies (spec changes),
// every enactment, and Nodes coming, going or changing labels; all but
// the policy's own spec changes are batched.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts SetupOptions) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &nncev1beta1.NodeNetworkConfigurationEnactment{}, policyIndex,
		func(o client.Object) []string { return []string{o.GetLabels()[shared.EnactmentPolicyLabel]} }); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nncp-rollout").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues()}).
		For(&nmstatev1.NodeNetworkConfigurationPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, batch.EnqueueAfter(r.Batch, policyOfEnactment)).
		WatchesMetadata(&corev1.Node{}, batch.EnqueueAfter(r.Batch, r.allPolicies), builder.WithPredicates(nodeChanges())).
		Complete(r)
}

// policyOfEnactment maps an enactment to its policy.
func policyOfEnactment(_ context.Context, o client.Object) []reconcile.Request {
	policy := o.GetLabels()[shared.EnactmentPolicyLabel]
	if policy == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: policy}}}
}

// allPolicies requeues every policy, for a node that came, went or changed
// labels: the nodes a policy selects may have changed.
func (r *Reconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return reqs
}

// nodeChanges passes Node events that may change which nodes a policy
// selects.
func nodeChanges() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool { return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) },
	}
}

// The policy controller's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

package handler

import (
	"context"
	"maps"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// policyOfEnactment maps an enactment to its policy. Enactments of every
// node are watched because they feed the policy's aggregated conditions.
func policyOfEnactment(_ context.Context, o client.Object) []reconcile.Request {
	policy := o.GetLabels()[shared.EnactmentPolicyLabel]
	if policy == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: policy}}}
}

// allPolicies requeues every policy, for a change of this node's labels.
func (r *Reconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return reqs
}

// policiesUsingPool requeues the policies with a capture from the pool.
func (r *Reconciler) policiesUsingPool(ctx context.Context, o client.Object) []reconcile.Request {
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range list.Items {
		c, _ := capture.Parse(p.Spec.Capture)
		for _, pool := range c.Pools() {
			if pool == o.GetName() {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
				break
			}
		}
	}
	return reqs
}

// thisNodesLabels passes events of this handler's node that may change
// which policies select it.
func (r *Reconciler) thisNodesLabels() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return e.Object.GetName() == r.NodeName },
		DeleteFunc:  func(e event.DeleteEvent) bool { return e.Object.GetName() == r.NodeName },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectNew.GetName() == r.NodeName && !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
	}
}

// poolChangesThatUnblock passes pool events after which a waiting or failed
// allocation may succeed: creation, deletion, a change of the Available
// condition, or addresses becoming free.
func poolChangesThatUnblock() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldPool, okOld := e.ObjectOld.(*ippoolv1.NodeIPPool)
			newPool, okNew := e.ObjectNew.(*ippoolv1.NodeIPPool)
			if !okOld || !okNew {
				return true
			}
			oldC := meta.FindStatusCondition(oldPool.Status.Conditions, ippoolv1.ConditionAvailable)
			newC := meta.FindStatusCondition(newPool.Status.Conditions, ippoolv1.ConditionAvailable)
			if (oldC == nil) != (newC == nil) || (newC != nil && (oldC.Status != newC.Status || oldC.Reason != newC.Reason)) {
				return true
			}
			return newPool.Status.Free > oldPool.Status.Free
		},
	}
}

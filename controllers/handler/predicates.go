package handler

import (
	"context"
	"maps"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// policyOfEnactment maps an enactment to its policy.
func policyOfEnactment(_ context.Context, o client.Object) []reconcile.Request {
	policy := o.GetLabels()[shared.EnactmentPolicyLabel]
	if policy == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: policy}}}
}

// specOrIncarnationChanged passes the events of a policy whose spec
// changed (a new generation), and the update that a watch makes of a
// policy deleted and created again under its name while it missed the
// deletion: a new UID, with the same generation, 1.
func specOrIncarnationChanged() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return e.ObjectOld.GetUID() != e.ObjectNew.GetUID() },
	})
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

// changesByOthers passes the events of this node's enactments that the
// handler did not cause itself: creation and deletion, a deletion started,
// annotations (a pool's nudge, a fence, a reset), the policy controller's
// answer to a slot request (granted, queued, aborted: status.slot), and a
// record changed (a reset, a retirement by the pool controller). The
// handler's own writes of conditions pass only when they also change the
// record or the slot, and those reconciles find nothing to do.
func changesByOthers() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldE, okOld := e.ObjectOld.(*nncev1beta1.NodeNetworkConfigurationEnactment)
			newE, okNew := e.ObjectNew.(*nncev1beta1.NodeNetworkConfigurationEnactment)
			if !okOld || !okNew {
				return true
			}
			return !maps.Equal(oldE.Annotations, newE.Annotations) ||
				oldE.DeletionTimestamp.IsZero() != newE.DeletionTimestamp.IsZero() ||
				!equality.Semantic.DeepEqual(answerOf(oldE), answerOf(newE)) ||
				!equality.Semantic.DeepEqual(oldE.Status.IPPool, newE.Status.IPPool)
		},
	}
}

// answerOf returns the policy controller's answer to the enactment's slot
// request: its slot without the request.
func answerOf(e *nncev1beta1.NodeNetworkConfigurationEnactment) nncev1beta1.ApplySlot {
	if e.Status.Slot == nil {
		return nncev1beta1.ApplySlot{}
	}
	answer := *e.Status.Slot
	answer.Requested = metav1.MicroTime{}
	return answer
}

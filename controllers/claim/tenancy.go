package claim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/capi"
)

// refusedNamespace returns the Ready=False condition of a claim whose
// namespace the pool does not serve (spec.claimNamespaceSelector), or nil
// when it serves it. A pool without a selector serves every namespace.
func (r *Reconciler) refusedNamespace(ctx context.Context, claim *unstructured.Unstructured, pool *ippoolv1.NodeIPPool) (*condition, error) {
	if pool.Spec.ClaimNamespaceSelector == nil {
		return nil, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(pool.Spec.ClaimNamespaceSelector)
	if err != nil {
		c := notReady(capi.ReasonPoolNotReady, fmt.Sprintf("NodeIPPool %s has an invalid spec.claimNamespaceSelector: %v: "+
			"its admin must correct it before it serves claims", pool.Name, err))
		return &c, nil
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.GetNamespace()}, &ns); err != nil {
		return nil, fmt.Errorf("get Namespace %s: %w", claim.GetNamespace(), err)
	}
	if selector.Matches(labels.Set(ns.Labels)) {
		return nil, nil
	}
	c := notReady(capi.ReasonNamespaceNotAllowed, fmt.Sprintf("NodeIPPool %s serves claims only from namespaces that match its "+
		"spec.claimNamespaceSelector (%s), and namespace %s does not: claim from another pool, or have the pool's admin "+
		"widen the selector or label the namespace", pool.Name, selector, ns.Name))
	return &c, nil
}

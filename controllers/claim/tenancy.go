package claim

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// refusal returns the Ready=False condition of a claim that may not take
// an address now, or nil. An IPAddress being restored keeps its
// address whatever the pool's namespace selector became, but only on the
// pool's word: the claim's own in-flight entry (restore writes it before
// it lets the IPAddress go). The restore annotation alone is the claim
// author's word, which anyone who may edit the claim can write: without
// the entry, the claim's namespace must be served, and an address another
// holder records is refused.
func (r *Reconciler) refusal(ctx context.Context, claim *unstructured.Unstructured, pool *ippoolv1.NodeIPPool) (*condition, error) {
	ask := askOf(claim)
	if len(assign.Resumable(pool, ask)) > 0 {
		return nil, nil
	}
	if c, err := r.refusedNamespace(ctx, claim, pool); err != nil || c != nil {
		return c, err
	}
	restoring := claim.GetAnnotations()[capi.RestoreAnnotation]
	if restoring == "" {
		return nil, nil
	}
	other, err := r.otherHolder(ctx, pool, ask.Asker.Holder, restoring)
	if err != nil || other == "" {
		return nil, err
	}
	c := notReady(capi.ReasonAllocationFailed, fmt.Sprintf("annotation %s=%s: %s holds that address of NodeIPPool %s: "+
		"remove the annotation to take another one", capi.RestoreAnnotation, restoring, other, pool.Name))
	return &c, nil
}

// otherHolder names a holder other than holder whose record, read from the
// API server, holds s in pool, or "". An unrecognized IPAddress holds
// nothing.
func (r *Reconciler) otherHolder(ctx context.Context, pool *ippoolv1.NodeIPPool, h holder.Ref, s string) (string, error) {
	owners, err := r.ownersOf(ctx, pool, s)
	for _, o := range owners {
		if !o.Unrecognized && o.Holder != h {
			return o.Describe(pool.Name), nil
		}
	}
	return "", err
}

// ownersOf returns the owners whose records, read from the API server,
// name s in pool, unrecognized IPAddresses included; none when s is no
// address.
func (r *Reconciler) ownersOf(ctx context.Context, pool *ippoolv1.NodeIPPool, s string) ([]poolstatus.Owner, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return nil, nil // takeBack refuses it, saying so
	}
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.APIReader.List(ctx, &enactments); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	records, err := holder.List(ctx, r.APIReader, enactments.Items, holder.Every(r.Signer))
	if err != nil {
		return nil, err
	}
	rng, _ := poolstatus.Range(pool)
	return poolstatus.Holders(pool.Name, rng, records)[ip], nil
}

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
	// The cache first; a refusal is confirmed on the API server, since a
	// namespace labelled a moment ago sends no event once its claim is
	// refused on a cache that lags.
	var ns corev1.Namespace
	for _, reader := range []client.Reader{r.Client, r.APIReader} {
		if err := reader.Get(ctx, types.NamespacedName{Name: claim.GetNamespace()}, &ns); err != nil {
			return nil, fmt.Errorf("get Namespace %s: %w", claim.GetNamespace(), err)
		}
		if selector.Matches(labels.Set(ns.Labels)) {
			return nil, nil
		}
	}
	c := notReady(capi.ReasonNamespaceNotAllowed, fmt.Sprintf("NodeIPPool %s serves claims only from namespaces that match its "+
		"spec.claimNamespaceSelector (%s), and namespace %s does not: claim from another pool, or have the pool's admin "+
		"widen the selector or label the namespace", pool.Name, selector, ns.Name))
	return &c, nil
}

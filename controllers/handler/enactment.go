package handler

import (
	"context"
	"fmt"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// node returns this node's metadata, read through reader.
func (r *Reconciler) node(ctx context.Context, reader client.Reader) (*metav1.PartialObjectMetadata, error) {
	return nodemeta.Get(ctx, reader, r.NodeName)
}

// selection tells whether the policy selects this node, and if not why,
// reading the Node through reader.
func (r *Reconciler) selection(ctx context.Context, reader client.Reader, policy *nmstatev1.NodeNetworkConfigurationPolicy) (bool, string, error) {
	if policy == nil {
		return false, "the policy is gone", nil
	}
	if !policy.DeletionTimestamp.IsZero() && usesPools(policy) {
		// Its addresses go back with the policy's deletion. A policy
		// without them is applied until it is gone, as kubernetes-nmstate's
		// handler does: one that a finalizer holds may change meanwhile
		// (companion mode's generated policies take their addresses off so).
		return false, "the policy is being deleted", nil
	}
	n, err := r.node(ctx, reader)
	switch {
	case apierrors.IsNotFound(err):
		return false, "the node is gone", nil
	case err != nil:
		return false, "", err
	}
	if !labels.SelectorFromSet(policy.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		return false, "the node selector no longer matches the node", nil
	}
	return true, "", nil
}

// ensureEnactment creates the enactment "<node>.<policy>" if it is missing,
// owned by the Node and labelled like kubernetes-nmstate's, and makes sure
// it carries the IP pool finalizer when the policy draws from a pool. A
// new enactment of a policy with ippool captures asks the pool controller
// for its addresses (RequestAnnotation) unless this handler allocates
// itself; one of a policy without them asks the policy controller for a
// slot (SlotRequestAnnotation).
func (r *Reconciler) ensureEnactment(ctx context.Context, s *scope) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	policy, e := s.policy, s.enactment
	wantsFinalizer := usesPools(policy)
	if e != nil {
		if !wantsFinalizer || controllerutil.ContainsFinalizer(e, ippoolv1.FinalizerIPPool) {
			return e, nil
		}
		controllerutil.AddFinalizer(e, ippoolv1.FinalizerIPPool)
		if err := r.Client.Update(ctx, e); err != nil {
			return nil, fmt.Errorf("add the finalizer to enactment %q: %w", e.Name, err)
		}
		return e, nil
	}
	// The Node comes from the API server: a cache that still shows a
	// Node just deleted would give it an enactment, and addresses, again.
	node, err := r.node(ctx, r.APIReader)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("node %q is gone: %w", r.NodeName, errCacheBehind)
	case err != nil:
		return nil, err
	}
	e = &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
		Name: shared.EnactmentKey(r.NodeName, policy.Name).Name,
		Labels: map[string]string{
			shared.EnactmentPolicyLabel: policy.Name,
			shared.EnactmentNodeLabel:   r.NodeName,
		},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
	}}
	if wantsFinalizer {
		controllerutil.AddFinalizer(e, ippoolv1.FinalizerIPPool)
	}
	e.Annotations = map[string]string{ippoolv1.PolicyUIDAnnotation: string(policy.UID)}
	switch pools := s.captures.Pools(); {
	case s.captureErr != nil:
	case len(pools) == 0:
		e.Annotations[ippoolv1.SlotRequestAnnotation] = "true"
	case !r.SelfAllocate:
		e.Annotations[ippoolv1.RequestAnnotation] = strings.Join(pools, ",")
	}
	if err := r.Client.Create(ctx, e); err != nil {
		return nil, fmt.Errorf("create enactment %q: %w", e.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("created enactment", "enactment", e.Name)
	return e, nil
}

func usesPools(policy *nmstatev1.NodeNetworkConfigurationPolicy) bool {
	return capture.UsesPools(policy.Spec.Capture)
}

// writeEnactment writes the enactment's status with o's conditions. The
// resourceVersion it was read at guards the write; a conflict is returned
// and the request retried.
func (r *Reconciler) writeEnactment(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, o outcome) error {
	before := e.Status.Conditions.Find(o.condition)
	transitioned := before == nil || before.Status != corev1.ConditionTrue || before.Reason != o.reason
	e.Status.Conditions = withConditions(e.Status.Conditions, o, r.Clock.Now())
	if err := r.Client.Status().Update(ctx, e); err != nil {
		return fmt.Errorf("write the status of enactment %q: %w", e.Name, err)
	}
	if transitioned && o.condition == shared.NodeNetworkConfigurationEnactmentConditionFailing {
		r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, string(o.reason), "Enact", "%s", o.message)
	}
	return nil
}

// end deletes an enactment that no longer applies, unless it is being
// deleted already. The pool controller retires it: it quarantines its
// addresses and lets it go. A nil enactment is gone already.
func (r *Reconciler) end(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, why string) error {
	if e == nil || !e.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.Client.Delete(ctx, e, client.Preconditions{UID: &e.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete enactment %q: %w", e.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("deleted enactment", "enactment", e.Name, "reason", why)
	return nil
}

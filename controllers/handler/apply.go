package handler

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// defaultMaxUnavailable is kubernetes-nmstate's default.
var defaultMaxUnavailable = intstr.FromString("50%")

// render reads the node's current state and renders the policy with the
// allocated addresses.
func (r *Reconciler) render(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	captures capture.Captures, addresses map[string]capture.Address) (capture.Output, error) {
	current, err := r.State.Show(ctx)
	if err != nil {
		return capture.Output{}, fmt.Errorf("read the current state: %w", err)
	}
	return capture.Render(capture.Input{
		DesiredState: policy.Spec.DesiredState.Raw,
		Captures:     captures,
		Allocated:    addresses,
		CurrentState: current,
	})
}

func addressStates(addresses map[string]capture.Address) map[string][]byte {
	states := map[string][]byte{}
	for name, a := range addresses {
		states[name] = a.State()
	}
	return states
}

// upToDate reports whether the enactment already shows this rendering of
// this policy generation as applied, with the same record: then there is
// nothing to write and nothing to apply.
func upToDate(e *nncev1beta1.NodeNetworkConfigurationEnactment, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	rendered capture.Output, captures capture.Captures, addresses map[string]capture.Address) bool {
	if e.Status.PolicyGeneration != policy.Generation ||
		trueCondition(e) != shared.NodeNetworkConfigurationEnactmentConditionAvailable ||
		!sameState(e.Status.DesiredState.Raw, rendered.DesiredState) {
		return false
	}
	want := e.DeepCopy()
	record(want, captures, addresses, rendered.CapturedStates, shared.NodeNetworkConfigurationEnactmentMetaInfo{})
	return maps.EqualFunc(want.Status.IPPool, e.Status.IPPool, func(a, b ippoolv1.PoolAllocation) bool {
		return slices.Equal(a.Allocated, b.Allocated)
	}) && maps.EqualFunc(want.Status.CapturedStates, e.Status.CapturedStates,
		func(a, b shared.NodeNetworkConfigurationEnactmentCapturedState) bool {
			return sameState(a.State.Raw, b.State.Raw)
		})
}

// sameState compares two YAML or JSON documents by content.
func sameState(a, b []byte) bool {
	ja, errA := yaml.YAMLToJSON(a)
	jb, errB := yaml.YAMLToJSON(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// applyWithinMaxUnavailable applies the desired state while holding one of
// the policy's maxUnavailable slots, and records the result; note is added
// to the success message.
func (r *Reconciler) applyWithinMaxUnavailable(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, desired []byte, note string) (ctrl.Result, error) {
	acquired, err := r.acquireSlot(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !acquired {
		o := pending(string(shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached),
			"maxUnavailable nodes are already being configured; waiting"+note, r.PendingRequeue)
		return r.conclude(ctx, policy, e, o)
	}
	current, applyErr, err := r.applyIfCurrent(ctx, e, desired)
	if current && r.StateChanged != nil {
		r.StateChanged()
	}
	if err := r.releaseSlot(ctx, policy.Name); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "release the maxUnavailable slot")
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !current {
		// The record changed since it was written (a reset, a fence): what
		// was rendered may hold an address that is no longer this node's.
		ctrl.LoggerFrom(ctx).Info("the enactment changed before the apply; rendering again")
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if applyErr != nil {
		ctrl.LoggerFrom(ctx).Info("applying the desired state failed", "error", applyErr.Error())
		o := failing(string(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure),
			fmt.Sprintf("error reconciling NodeNetworkConfigurationPolicy on node %s: %v", r.NodeName, applyErr))
		o.requeueAfter = r.FailedRequeue
		return r.conclude(ctx, policy, e, o)
	}
	ctrl.LoggerFrom(ctx).Info("applied desired state", "ippool", e.Status.IPPool)
	res, err := r.conclude(ctx, policy, e, available("successfully reconciled"+note))
	if err == nil {
		r.notes.done(e.Name)
	}
	return res, err
}

// applyIfCurrent applies desired if the enactment on the API server is still
// the one this reconcile wrote, under NetworkLock: an address whose record
// was removed meanwhile (a reset, a fence) is never put on the network, and
// the state reporter never publishes a state from the middle of an apply.
// It reports whether the enactment was current and how the apply went; err
// is a failure to read the enactment, to retry.
func (r *Reconciler) applyIfCurrent(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment,
	desired []byte) (current bool, applyErr, err error) {
	if r.NetworkLock != nil {
		r.NetworkLock.Lock()
		defer r.NetworkLock.Unlock()
	}
	var fresh nncev1beta1.NodeNetworkConfigurationEnactment
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(e), &fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil, nil
		}
		return false, nil, fmt.Errorf("confirm enactment %q before applying: %w", e.Name, err)
	}
	if fresh.ResourceVersion != e.ResourceVersion {
		return false, nil, nil
	}
	return true, r.State.Apply(ctx, desired), nil
}

// matchingNodes counts the nodes the policy selects, from the cached node
// metadata.
func (r *Reconciler) matchingNodes(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy) (int, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, nodes, client.MatchingLabels(policy.Spec.NodeSelector)); err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	return len(nodes.Items), nil
}

// acquireSlot takes one of the policy's maxUnavailable slots by raising
// status.unavailableNodeCount under the policy's resourceVersion. A count
// not updated for SlotTimeout is treated as abandoned and reset.
func (r *Reconciler) acquireSlot(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy) (bool, error) {
	matching, err := r.matchingNodes(ctx, policy)
	if err != nil {
		return false, err
	}
	maxUnavailable := defaultMaxUnavailable
	if policy.Spec.MaxUnavailable != nil {
		maxUnavailable = *policy.Spec.MaxUnavailable
	}
	limit, err := intstr.GetScaledValueFromIntOrPercent(&maxUnavailable, matching, true)
	if err != nil {
		return false, fmt.Errorf("policy %q: maxUnavailable %q: %w", policy.Name, maxUnavailable.String(), err)
	}
	limit = max(limit, 1)
	acquired := false
	err = r.updatePolicy(ctx, policy.Name, func(p *nmstatev1.NodeNetworkConfigurationPolicy) bool {
		now := r.Clock.Now()
		count := p.Status.UnavailableNodeCount
		if last := p.Status.LastUnavailableNodeCountUpdate; last != nil && now.Sub(last.Time) > r.SlotTimeout {
			count = 0
		}
		if acquired = count < limit; !acquired {
			return false
		}
		p.Status.UnavailableNodeCount = count + 1
		p.Status.LastUnavailableNodeCountUpdate = &metav1.Time{Time: now.Truncate(time.Second)}
		return true
	})
	return acquired, err
}

func (r *Reconciler) releaseSlot(ctx context.Context, policy string) error {
	return r.updatePolicy(ctx, policy, func(p *nmstatev1.NodeNetworkConfigurationPolicy) bool {
		if p.Status.UnavailableNodeCount == 0 {
			return false
		}
		p.Status.UnavailableNodeCount--
		p.Status.LastUnavailableNodeCountUpdate = &metav1.Time{Time: r.Clock.Now().Truncate(time.Second)}
		return true
	})
}

// updatePolicyStatus refreshes the policy's Available, Degraded and
// Progressing conditions from its enactments and the nodes it selects.
func (r *Reconciler) updatePolicyStatus(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy) error {
	if policy == nil || !policy.DeletionTimestamp.IsZero() {
		return nil
	}
	matching, err := r.matchingNodes(ctx, policy)
	if err != nil {
		return err
	}
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := r.Client.List(ctx, &enactments, client.MatchingLabels{shared.EnactmentPolicyLabel: policy.Name}); err != nil {
		return fmt.Errorf("list the enactments of policy %q: %w", policy.Name, err)
	}
	return r.updatePolicy(ctx, policy.Name, func(p *nmstatev1.NodeNetworkConfigurationPolicy) bool {
		s := summarize(matching, p.Generation, enactments.Items)
		conds := policyConditions(p.Status.Conditions, s, r.Clock.Now())
		if conditions.Same(conds, p.Status.Conditions) {
			return false
		}
		p.Status.Conditions = conds
		return true
	})
}

// updatePolicy reads the policy from the API server, lets mutate change its
// status, and writes it if mutate says so, retrying on conflicts.
func (r *Reconciler) updatePolicy(ctx context.Context, name string, mutate func(*nmstatev1.NodeNetworkConfigurationPolicy) bool) error {
	err := retry.RetryOnConflict(r.PolicyStatusBackoff, func() error {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		if !mutate(&p) {
			return nil
		}
		return r.Client.Status().Update(ctx, &p)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update the status of policy %q: %w", name, err)
	}
	return nil
}

package companion

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
)

// writeStatus sets next's conditions and writes its status, under p's
// resourceVersion, if it changed; a Degraded message that changed is a
// Warning Event.
func (r *Reconciler) writeStatus(ctx context.Context, w *world, p, next *ippoolv1.PooledNodeNetworkConfigurationPolicy, problems []problem, pl plan) error {
	now := r.Clock.Now()
	old := p.Status.Conditions
	const degraded = shared.NodeNetworkConfigurationPolicyConditionDegraded
	switch {
	case w.invalid != nil:
		next.Status.Conditions = policystatus.List(old, degraded, ippoolv1.ReasonInvalidCapture,
			fmt.Sprintf("%v; no node is configured until the policy is corrected", w.invalid), now)
	case w.deleting && len(problems) > 0:
		// What the deletion waits for, as a release of a selected policy
		// says it: nothing stuck without a word.
		next.Status.Conditions = policystatus.List(old, degraded, problems[0].reason,
			fmt.Sprintf("%s (policy being deleted: taking its addresses off %d nodes)", messages(problems), len(next.Status.Nodes)), now)
	case w.deleting:
		next.Status.Conditions = policystatus.List(old, shared.NodeNetworkConfigurationPolicyConditionProgressing,
			shared.NodeNetworkConfigurationPolicyConditionConfigurationProgressing,
			fmt.Sprintf("Policy is being deleted: taking its addresses off %d nodes", len(next.Status.Nodes)), now)
	case len(problems) > 0:
		next.Status.Conditions = policystatus.List(old, degraded, problems[0].reason,
			fmt.Sprintf("%s (%d/%d nodes successfully configured)", messages(problems), pl.summary.Available, pl.summary.Matching), now)
	default:
		next.Status.Conditions = policystatus.Conditions(old, pl.summary, now)
	}
	next.Status.SelectedNodes = len(w.selected)
	next.Status.ObservedGeneration = p.Generation
	if sameStatus(p, next) {
		return nil
	}
	if c := next.Status.Conditions.Find(degraded); c != nil && c.Status == corev1.ConditionTrue {
		if was := old.Find(degraded); was == nil || was.Status != corev1.ConditionTrue || was.Message != c.Message {
			r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, string(c.Reason), "Configure", "%s", c.Message)
		}
	}
	if err := r.Client.Status().Update(ctx, next); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("%s %s changed meanwhile, looking again: %w", holder.PooledPolicyKind, p.Name, err)
		}
		return fmt.Errorf("write the status of %s %s: %w", holder.PooledPolicyKind, p.Name, err)
	}
	return nil
}

// messages joins the problems' messages, each once.
func messages(problems []problem) string {
	var out []string
	for _, p := range problems {
		if !slices.Contains(out, p.message) {
			out = append(out, p.message)
		}
	}
	return strings.Join(out, "; ")
}

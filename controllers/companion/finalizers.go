package companion

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
)

// The finalizer nmstate.io/pooled-policy on the generated policies, and
// the attempts of a removal policy. The finalizer
// keeps each until its node's addresses are off (the garbage collector
// deletes them first when their pooled policy is deleted with
// --cascade=foreground); letGo removes it when the pooled policy lets one
// go, unstrand when that pooled policy is gone.

// letGo deletes a generated policy: its finalizer, which kept it from the
// garbage collector (a pooled policy deleted with --cascade=foreground) or
// from anyone until its node's addresses were off, removed first.
func (r *Reconciler) letGo(ctx context.Context, g *metav1.PartialObjectMetadata) error {
	if controllerutil.ContainsFinalizer(g, ippoolv1.FinalizerPooledPolicy) {
		patch := client.MergeFromWithOptions(g.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(g, ippoolv1.FinalizerPooledPolicy)
		if err := r.Client.Patch(ctx, g, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("remove the finalizer of policy %s: %w", g.Name, err)
		}
	}
	if !g.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.Client.Delete(ctx, g, client.Preconditions{UID: &g.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete policy %s: %w", g.Name, err)
	}
	return nil
}

// holdGenerated gives the finalizer to the generated policies that lack
// it (written before this version) and are not deleted.
func (r *Reconciler) holdGenerated(ctx context.Context, w *world) error {
	for _, g := range w.generated {
		if !g.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(g, ippoolv1.FinalizerPooledPolicy) {
			continue
		}
		patch := client.MergeFromWithOptions(g.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(g, ippoolv1.FinalizerPooledPolicy)
		if err := r.Client.Patch(ctx, g, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("add the finalizer to policy %s: %w", g.Name, err)
		}
	}
	return nil
}

// releaseAttempt returns how many times the removal policy g was written
// again after it failed (0 for none, or no policy).
func releaseAttempt(g metav1.Object) int {
	if !isRemoval(g) {
		return 0
	}
	n, _ := strconv.Atoi(g.GetAnnotations()[ippoolv1.PooledReleaseAttemptAnnotation])
	return n
}

// isRemoval reports whether an NNCP takes released addresses off.
func isRemoval(g metav1.Object) bool {
	return g.GetAnnotations()[ippoolv1.PooledReleaseAnnotation] == "true"
}

// stranded reports whether g, a generated policy being deleted, keeps the
// finalizer of a pooled policy that no longer exists (its owner is not
// live, the policy of that name, uid, or none): one deleted without its
// own finalizer, or an earlier one of the same name. Nothing else would
// let it go.
func stranded(g *metav1.PartialObjectMetadata, live types.UID) bool {
	ref := metav1.GetControllerOf(g)
	return !g.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(g, ippoolv1.FinalizerPooledPolicy) &&
		ref != nil && ref.Kind == holder.PooledPolicyKind && ref.UID != live
}

// unstrand removes the finalizer of a stranded generated policy.
func (r *Reconciler) unstrand(ctx context.Context, g *metav1.PartialObjectMetadata) error {
	patch := client.MergeFromWithOptions(g.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(g, ippoolv1.FinalizerPooledPolicy)
	if err := r.Client.Patch(ctx, g, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove the finalizer of policy %s, whose pooled policy is gone: %w", g.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("let a policy go whose pooled policy is gone", "policy", g.Name)
	return nil
}

// unstrandAll lets go the stranded generated policies of the pooled
// policy called name, which is gone.
func (r *Reconciler) unstrandAll(ctx context.Context, name string) error {
	list := policymeta.List()
	if err := r.Client.List(ctx, list, client.MatchingLabels{ippoolv1.PooledPolicyLabel: name}); err != nil {
		return fmt.Errorf("list the policies of %s %s: %w", holder.PooledPolicyKind, name, err)
	}
	for i := range list.Items {
		if stranded(&list.Items[i], "") {
			if err := r.unstrand(ctx, &list.Items[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

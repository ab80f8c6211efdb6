package envtest

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Collect plays one pass of Kubernetes' garbage collector, which envtest
// does not run, over owner: deleted with --cascade=foreground, the
// objects of dependents (a list of the kind it owns, nil for none) that
// owner owns are deleted, and once none is left the collector's finalizer
// comes off owner; deleted with --cascade=orphan, each such dependent
// loses its owner reference first. It returns whether owner is gone; a
// test calls it until then, racing the controllers as the collector does.
func Collect(ctx context.Context, c client.Client, owner client.Object, dependents client.ObjectList) (gone bool, err error) {
	fresh, ok := owner.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("%T is no client.Object", owner)
	}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(owner), fresh); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	finalizer := ""
	for _, f := range []string{metav1.FinalizerDeleteDependents, metav1.FinalizerOrphanDependents} {
		if slices.Contains(fresh.GetFinalizers(), f) {
			finalizer = f
		}
	}
	if finalizer == "" {
		return false, nil // another finalizer holds it: its controller's business
	}
	owned, err := ownedBy(ctx, c, fresh, dependents)
	if err != nil {
		return false, err
	}
	for _, d := range owned {
		if finalizer == metav1.FinalizerDeleteDependents {
			err = c.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground))
		} else {
			d.SetOwnerReferences(slices.DeleteFunc(d.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == fresh.GetUID() }))
			err = c.Update(ctx, d)
		}
		if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return false, err
		}
	}
	if len(owned) > 0 {
		return false, nil // the next pass sees them gone, or orphaned
	}
	fresh.SetFinalizers(slices.DeleteFunc(fresh.GetFinalizers(), func(f string) bool { return f == finalizer }))
	if err := c.Update(ctx, fresh); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return false, err
	}
	return false, nil
}

// ownedBy returns the objects of dependents that owner owns, those being
// deleted included (the collector waits for them to go).
func ownedBy(ctx context.Context, c client.Client, owner client.Object, dependents client.ObjectList) ([]client.Object, error) {
	if dependents == nil {
		return nil, nil
	}
	list, ok := dependents.DeepCopyObject().(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%T is no client.ObjectList", dependents)
	}
	if err := c.List(ctx, list, client.InNamespace(owner.GetNamespace())); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var out []client.Object
	for _, item := range items {
		o, ok := item.(client.Object)
		if ok && slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() }) {
			out = append(out, o)
		}
	}
	return out, nil
}

// CollectOrphans plays the garbage collector once its owner is gone: it
// deletes every object of dependents that names the owner uid among its
// owners, as the collector does with dependents of an owner deleted in the
// background (kubectl's default).
func CollectOrphans(ctx context.Context, c client.Client, uid types.UID, dependents client.ObjectList) error {
	owner := &metav1.PartialObjectMetadata{}
	owner.SetUID(uid)
	owned, err := ownedBy(ctx, c, owner, dependents)
	if err != nil {
		return err
	}
	for _, d := range owned {
		if err := c.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

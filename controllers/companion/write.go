package companion

import (
	"context"
	"errors"
	"fmt"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
)

// apply writes the plan: the NNCPs to create or change, then those to
// delete. A conflict or an NNCP created meanwhile is looked at again. An
// NNCP that puts addresses on a node is written only once its Node holds
// their release (guard).
func (r *Reconciler) apply(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy, pl plan, retries map[string]string) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	for _, g := range pl.write {
		node := g.Annotations[ippoolv1.PooledNodeAnnotation]
		if !isRemoval(g) {
			ok, err := r.guard(ctx, node)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !ok {
				// Deleted meanwhile: the next pass releases it.
				log.V(1).Info("not writing the policy of a Node being deleted or gone", "policy", g.Name, "node", node)
				continue
			}
		}
		var err error
		if g.ResourceVersion == "" {
			err = r.clearEarlier(ctx, p, node, g.Name)
			if err == nil {
				err = r.Client.Create(ctx, g)
			}
		} else {
			err = r.Client.Update(ctx, g)
		}
		switch {
		case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
			// Changed or created meanwhile (a name taken is reported by
			// the next pass's plan): the others go on.
			errs = append(errs, fmt.Errorf("policy %s changed meanwhile, looking again: %w", g.Name, err))
			continue
		case err != nil:
			r.Recorder.Eventf(p, g, corev1.EventTypeWarning, string(shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure), "Generate",
				"could not write policy %s of node %s: %v", g.Name, node, err)
			errs = append(errs, fmt.Errorf("write policy %s: %w", g.Name, err))
			continue
		}
		r.written.Store(g.Name, writtenAt{uid: g.UID, generation: g.Generation, at: r.Clock.Now()})
		r.reads.remember(g)
		log.Info("wrote policy", "policy", g.Name, "node", node, "release", isRemoval(g))
		if msg := retries[node]; msg != "" && isRemoval(g) {
			r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ippoolv1.ReasonRemovalRetried, "Release", "%s", msg)
		}
	}
	for _, g := range pl.remove {
		if err := r.letGo(ctx, g); err != nil {
			errs = append(errs, err)
			continue
		}
		r.written.Delete(g.Name)
		r.reads.forget(g.Name)
		r.renders.Delete(string(p.UID) + "/" + g.Annotations[ippoolv1.PooledNodeAnnotation])
		log.Info("deleted policy", "policy", g.Name, "node", g.Annotations[ippoolv1.PooledNodeAnnotation])
	}
	return errors.Join(errs...)
}

// clearEarlier deletes the enactment an earlier policy named name left on
// node, before name is created again. kubernetes-nmstate's handler deletes
// a policy's enactment when it sees the policy go; one that missed it (it
// lagged behind, and met the deletion and the new policy as one change)
// keeps the enactment and takes it up for the new policy at generation 1
// again: the earlier conditions stay until its first apply, and so does
// its retry count, which may skip the apply altogether. Both reads are
// the API server's, and the delete is under what was read (UID and
// resourceVersion): a policy of the name that exists (the cache is
// behind), or that took the enactment up meanwhile, keeps it, and the
// create is looked at again. An enactment of another node or policy under
// the name (names with dots collide), or one a finalizer keeps, stops the
// create: it would be taken up as this one.
func (r *Reconciler) clearEarlier(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy, node, name string) error {
	e, err := r.earlierEnactment(ctx, node, name)
	if e == nil || err != nil {
		return err
	}
	if e.DeletionTimestamp.IsZero() {
		err := r.Client.Delete(ctx, e, client.Preconditions{UID: &e.UID, ResourceVersion: &e.ResourceVersion})
		if apierrors.IsNotFound(err) {
			return nil // gone meanwhile: kubernetes-nmstate's handler caught up
		}
		if err != nil {
			return fmt.Errorf("delete enactment %s, left by an earlier policy %s: %w", e.Name, name, err)
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ippoolv1.ReasonEarlierEnactmentDeleted, "Generate",
			"deleted enactment %s, left by an earlier policy %s (generation %d, %s), before creating the policy of node %s again",
			e.Name, name, e.Status.PolicyGeneration, conditions.TrueTypeOr(e.Status.Conditions, "no condition"), node)
	}
	r.cleared.Store(e.Name, e.UID)
	if len(e.Finalizers) == 0 {
		return nil
	}
	return errors.New(keptBy(e, name))
}

// earlierBlocks says why an enactment the cache shows under the name of
// node's policy stops its create (clearEarlier, which reads the API
// server, refuses it too), or nil: one of another node or policy whose
// name collides, or an earlier policy's that finalizers keep while it is
// being deleted. One that nothing keeps is deleted by clearEarlier before
// the create.
func (r *Reconciler) earlierBlocks(ctx context.Context, name, node string) *problem {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := r.Client.Get(ctx, shared.EnactmentKey(node, name), &e); err != nil {
		return nil // not found (or unreadable: clearEarlier says)
	}
	if why := collides(&e, node, name); why != "" {
		return &problem{shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, why}
	}
	if !e.DeletionTimestamp.IsZero() && len(e.Finalizers) > 0 {
		return &problem{shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, keptBy(&e, name)}
	}
	return nil
}

// keptBy says that finalizers keep e, an earlier policy's enactment being
// deleted, and so stop the create of policy name.
func keptBy(e *nncev1beta1.NodeNetworkConfigurationEnactment, name string) string {
	return fmt.Sprintf("enactment %s, left by an earlier policy %s, is being deleted and finalizers %v keep it: "+
		"policy %s is created once it is gone; if what set them is gone too, remove them "+
		"(kubectl patch nnce %s --type=merge -p '{\"metadata\":{\"finalizers\":null}}')", e.Name, name, e.Finalizers, name, e.Name)
}

// collides says how e, found under the enactment name of node's policy
// name, is another node's or policy's (names with dots collide), or "".
func collides(e *nncev1beta1.NodeNetworkConfigurationEnactment, node, name string) string {
	if e.Labels[shared.EnactmentNodeLabel] == node && e.Labels[shared.EnactmentPolicyLabel] == name {
		return ""
	}
	return fmt.Sprintf("enactment %s, which policy %s of node %s would use, is node %q's of policy %q: the names collide; "+
		"rename the pooled policy", e.Name, name, node, e.Labels[shared.EnactmentNodeLabel], e.Labels[shared.EnactmentPolicyLabel])
}

// earlierEnactment reads, from the API server, the enactment of node's
// policy name while no policy of that name exists: an earlier policy's,
// or nil. A policy of the name that exists (the cache is behind) is
// AlreadyExists; an enactment of another node or policy under the name
// is an error.
func (r *Reconciler) earlierEnactment(ctx context.Context, node, name string) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	err := r.APIReader.Get(ctx, shared.EnactmentKey(node, name), &e)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get the enactment of an earlier policy %s: %w", name, err)
	}
	if why := collides(&e, node, name); why != "" {
		return nil, errors.New(why)
	}
	err = r.APIReader.Get(ctx, types.NamespacedName{Name: name}, &nmstatev1.NodeNetworkConfigurationPolicy{})
	if err == nil {
		return nil, apierrors.NewAlreadyExists(nmstatev1.GroupVersion.WithResource("nodenetworkconfigurationpolicies").GroupResource(), name)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get policy %s: %w", name, err)
	}
	return &e, nil
}

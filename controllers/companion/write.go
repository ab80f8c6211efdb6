package companion

import (
	"context"
	"errors"
	"fmt"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
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
			err = r.Client.Create(ctx, g)
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
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, string(shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure), "Generate",
				"could not write policy %s of node %s: %v", g.Name, node, err)
			errs = append(errs, fmt.Errorf("write policy %s: %w", g.Name, err))
			continue
		}
		r.written.Store(g.Name, g.Generation)
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
		r.renders.Delete(string(p.UID) + "/" + g.Annotations[ippoolv1.PooledNodeAnnotation])
		log.Info("deleted policy", "policy", g.Name, "node", g.Annotations[ippoolv1.PooledNodeAnnotation])
	}
	return errors.Join(errs...)
}

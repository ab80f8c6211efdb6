package pool

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
)

// fenceOutcome is what fence found.
type fenceOutcome int

const (
	// undecided: the enactment records the address after all, or just
	// changed; the next pass looks again.
	undecided fenceOutcome = iota
	// fenced: the enactment was never written since the address was taken,
	// and now never can be under the token.
	fenced
	// movedOn: the enactment is gone, or was written since without the
	// address.
	movedOn
)

// fence makes sure an address taken for an enactment but not recorded past
// the grace period can never be recorded. The handler records under the
// token resourceVersion, so any write to the enactment makes a late record
// fail. If the enactment is gone or changed since, the token is dead
// already (movedOn); otherwise the controller writes the FenceAnnotation
// under the token (fenced). A conflict means the enactment just changed,
// maybe to record the address (undecided).
func (r *Reconciler) fence(ctx context.Context, pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) (fenceOutcome, error) {
	h := holder.Parse(e.HolderName())
	if h.Kind == holder.PolicyNode {
		return r.fencePolicy(ctx, pool, e, h.Name, h.Node)
	}
	if h.Foreign() {
		// Taken by this process for a Cluster API claim, whose controller
		// records it in the IPAddress (claimHolds keeps the entry while
		// the claim may still record it): the entry goes, the bit stays
		// for garbage collection.
		return movedOn, nil
	}
	var enactment nncev1beta1.NodeNetworkConfigurationEnactment
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: e.HolderName()}, &enactment)
	switch {
	case apierrors.IsNotFound(err):
		return movedOn, nil
	case err != nil:
		return undecided, fmt.Errorf("get enactment %q: %w", e.HolderName(), err)
	case slices.Contains(recordedIPs(&enactment), e.IP):
		return undecided, nil // recorded after all: pruned on the next pass
	case enactment.ResourceVersion != e.Token:
		return movedOn, nil
	}
	patch := client.MergeFromWithOptions(enactment.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if enactment.Annotations == nil {
		enactment.Annotations = map[string]string{}
	}
	// The token makes every fence a new value: a fence that left the
	// object as it was would not move its resourceVersion.
	enactment.Annotations[ippoolv1.FenceAnnotation] = ippoolv1.FenceValue(pool.Name, e.IP, e.Token)
	if err := r.Client.Patch(ctx, &enactment, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return movedOn, nil
		case apierrors.IsConflict(err):
			return undecided, nil
		}
		return undecided, fmt.Errorf("fence enactment %q: %w", e.HolderName(), err)
	}
	r.Recorder.Eventf(&enactment, pool, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
		"NodeIPPool %s revoked %s: taken for this enactment %s ago and never recorded; its handler allocates again",
		pool.Name, e.IP, r.Clock.Since(e.Since.Time).Round(time.Second))
	return fenced, nil
}

// fencePolicy is fence for the entry of a pooled policy's node: its
// controller records under the token the policy's resourceVersion (its
// status write is guarded by it), so a fence written on the policy makes a
// stalled pass's record fail.
func (r *Reconciler) fencePolicy(ctx context.Context, pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress, policy, node string) (fenceOutcome, error) {
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: policy}, &p)
	switch {
	case apierrors.IsNotFound(err):
		return movedOn, nil
	case err != nil:
		return undecided, fmt.Errorf("get %s %q: %w", holder.PooledPolicyKind, policy, err)
	}
	if rec := p.Status.NodeOf(node); rec != nil && slices.ContainsFunc(rec.Held(), func(a ippoolv1.PooledAddress) bool { return a.IP == e.IP }) {
		return undecided, nil // recorded after all: pruned on the next pass
	}
	if p.ResourceVersion != e.Token {
		return movedOn, nil
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[ippoolv1.FenceAnnotation] = ippoolv1.FenceValue(pool.Name, e.IP, e.Token)
	if err := r.Client.Patch(ctx, &p, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return movedOn, nil
		case apierrors.IsConflict(err):
			return undecided, nil
		}
		return undecided, fmt.Errorf("fence %s %q: %w", holder.PooledPolicyKind, policy, err)
	}
	r.Recorder.Eventf(&p, pool, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
		"NodeIPPool %s revoked %s: taken for node %s %s ago and never recorded; the node gets an address again",
		pool.Name, e.IP, node, r.Clock.Since(e.Since.Time).Round(time.Second))
	return fenced, nil
}

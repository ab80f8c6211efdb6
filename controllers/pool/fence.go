package pool

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// fence makes sure an address taken for a holder but not recorded past
// the grace period can never be recorded. Every kind with a fence records
// under the token the resourceVersion of the object its record lives in
// (an enactment's, or a pooled policy's for its nodes: its status write
// is guarded by it), so any write to that object makes a late record
// fail. If the object is gone or changed since, the token is dead already
// (movedOn); otherwise the controller writes the FenceAnnotation under
// the token (fenced). A conflict means the object just changed, maybe to
// record the address (undecided).
func (r *Reconciler) fence(ctx context.Context, pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) (fenceOutcome, error) {
	h := holder.Parse(e.HolderName())
	if h.Kind == holder.Claim || h.Kind == holder.IPAddress {
		// Taken by this process for a Cluster API claim, whose controller
		// records it in the IPAddress (claimHolds keeps the entry while
		// the claim may still record it): the entry goes, the bit stays
		// for garbage collection.
		return movedOn, nil
	}
	rec := recordObjectOf(h)
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rec.obj), rec.obj)
	switch {
	case apierrors.IsNotFound(err):
		return movedOn, nil
	case err != nil:
		return undecided, fmt.Errorf("get %s: %w", rec.name, err)
	case slices.Contains(rec.recorded(), e.IP):
		return undecided, nil // recorded after all: pruned on the next pass
	case rec.obj.GetResourceVersion() != e.Token:
		return movedOn, nil
	}
	patch := client.MergeFromWithOptions(rec.obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	annotations := rec.obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	// The token makes every fence a new value: a fence that left the
	// object as it was would not move its resourceVersion.
	annotations[ippoolv1.FenceAnnotation] = ippoolv1.FenceValue(pool.Name, e.IP, e.Token)
	rec.obj.SetAnnotations(annotations)
	if err := r.Client.Patch(ctx, rec.obj, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return movedOn, nil
		case apierrors.IsConflict(err):
			return undecided, nil
		}
		return undecided, fmt.Errorf("fence %s: %w", rec.name, err)
	}
	r.Recorder.Eventf(rec.obj, pool, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
		"NodeIPPool %s revoked %s: taken for %s %s ago and never recorded; %s",
		pool.Name, e.IP, rec.whom, r.Clock.Since(e.Since.Time).Round(time.Second), rec.then)
	return fenced, nil
}

// recordObject is the object a fenced holder's record lives in, as fence
// needs it.
type recordObject struct {
	obj client.Object
	// name names it in errors; whom names the holder, and then what comes
	// next, in the Event.
	name, whom, then string
	// recorded returns the addresses its record holds for the holder,
	// once obj is read.
	recorded func() []string
}

// recordObjectOf returns the object the record of h, an enactment or a
// pooled policy's node, lives in.
func recordObjectOf(h holder.Ref) recordObject {
	if h.Kind == holder.PolicyNode {
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}
		return recordObject{obj: p, name: fmt.Sprintf("%s %q", holder.PooledPolicyKind, h.Name),
			whom: "node " + h.Node, then: "the node gets an address again",
			recorded: func() []string {
				var ips []string
				if rec := p.Status.NodeOf(h.Node); rec != nil {
					for _, a := range rec.Held() {
						ips = append(ips, a.IP)
					}
				}
				return ips
			}}
	}
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}
	return recordObject{obj: e, name: fmt.Sprintf("enactment %q", h.Name),
		whom: "this enactment", then: "its handler allocates again",
		recorded: func() []string { return recordedIPs(e) }}
}

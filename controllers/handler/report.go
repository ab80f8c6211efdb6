package handler

// The Events the handler raises on an enactment about its addresses.

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
)

// reportMoved raises a Warning Event on the enactment for every recorded
// address that was replaced because its pool no longer hands it out.
func (r *Reconciler) reportMoved(e *nncev1beta1.NodeNetworkConfigurationEnactment, moved []string) {
	for _, m := range moved {
		r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressOutsideRange, "Allocate",
			"%s; allocating a new address", m)
	}
}

// reportNotes tells, with the pool controller's words, of addresses that
// came back to this enactment (its node re-added under its name within the
// quarantine period) or were kept for another node's return.
func (r *Reconciler) reportNotes(e *nncev1beta1.NodeNetworkConfigurationEnactment, notes map[string]assign.Notes) {
	for _, pool := range slices.Sorted(maps.Keys(notes)) {
		p := &ippoolv1.NodeIPPool{}
		p.Name = pool
		for _, n := range notes[pool].Events(pool) {
			r.Recorder.Eventf(e, p, n.Type(), n.Reason, "Allocate", "%s", n.Message)
		}
	}
}

// reportRevoked tells, with an Event, that fresh addresses were revoked by
// the pool controller before this handler could record them.
func (r *Reconciler) reportRevoked(ctx context.Context, alloc *allocation) {
	if len(alloc.fresh) == 0 {
		return
	}
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: alloc.enactment}, &e); err != nil {
		return
	}
	fence := e.Annotations[ippoolv1.FenceAnnotation]
	for pool, ips := range alloc.fresh {
		for _, ip := range ips {
			if fence == ippoolv1.FenceValue(pool, ip, alloc.token) {
				ctrl.LoggerFrom(ctx).Info("an unrecorded address was revoked; not applying it", "pool", pool, "ip", ip)
				r.Recorder.Eventf(&e, nil, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Record",
					"NodeIPPool %s revoked %s before node %s recorded it (the handler stalled past the grace period); not applied, allocating again",
					pool, ip, r.NodeName)
			}
		}
	}
}

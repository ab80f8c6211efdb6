package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/annotations"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/retire"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

// resets are the reset annotations that concern one pool.
type resets struct {
	// enactments are the enactments whose record of the pool is dropped:
	// those annotated, and those of annotated policies.
	enactments []string
	// annotated are the objects carrying an annotation for this pool, the
	// pool itself included; the annotation is removed when the work is done.
	annotated []client.Object
}

func (rs resets) empty() bool { return len(rs.annotated) == 0 }

// resetsOf collects the reset annotations for pool: found in the cache,
// confirmed on the API server (right after a reset the cache may still
// show an annotation this controller has just removed, and acting on it
// again would drop the addresses the handlers have just allocated anew),
// then expanded to the enactments whose records are dropped.
func (r *Reconciler) resetsOf(ctx context.Context, pool *ippoolv1.NodeIPPool, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) (resets, error) {
	var candidates []client.Object
	if _, ok := pool.Annotations[ippoolv1.ResetIPPoolAnnotation]; ok {
		candidates = append(candidates, pool)
	}
	for i := range enactments {
		if e := &enactments[i]; e.Annotations[ippoolv1.ResetIPPoolAnnotation] == pool.Name {
			candidates = append(candidates, e)
		}
	}
	var policies nmstatev1.NodeNetworkConfigurationPolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return resets{}, fmt.Errorf("list policies: %w", err)
	}
	for i := range policies.Items {
		if p := &policies.Items[i]; p.Annotations[ippoolv1.ResetIPPoolAnnotation] == pool.Name {
			candidates = append(candidates, p)
		}
	}
	var rs resets
	for _, o := range candidates {
		fresh, err := r.confirmReset(ctx, o, pool.Name)
		if err != nil {
			return resets{}, err
		}
		if fresh != nil {
			rs.annotated = append(rs.annotated, fresh)
		}
	}
	return rs, r.expand(ctx, &rs)
}

// confirmReset re-reads an annotated object from the API server and returns
// it if it still asks for a reset of pool, or nil.
func (r *Reconciler) confirmReset(ctx context.Context, o client.Object, pool string) (client.Object, error) {
	fresh := o.DeepCopyObject().(client.Object)
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o), fresh); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	value, ok := fresh.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]
	_, isPool := fresh.(*ippoolv1.NodeIPPool)
	if !ok || (!isPool && value != pool) {
		return nil, nil
	}
	return fresh, nil
}

// expand lists the enactments whose records the resets drop: those
// annotated and those of annotated policies.
func (r *Reconciler) expand(ctx context.Context, rs *resets) error {
	for _, o := range rs.annotated {
		switch o.(type) {
		case *nncev1beta1.NodeNetworkConfigurationEnactment:
			rs.enactments = append(rs.enactments, o.GetName())
		case *nmstatev1.NodeNetworkConfigurationPolicy:
			var of nncev1beta1.NodeNetworkConfigurationEnactmentList
			if err := r.Client.List(ctx, &of, client.MatchingLabels{shared.EnactmentPolicyLabel: o.GetName()}); err != nil {
				return fmt.Errorf("list the enactments of policy %q: %w", o.GetName(), err)
			}
			for _, e := range of.Items {
				rs.enactments = append(rs.enactments, e.Name)
			}
		}
	}
	slices.Sort(rs.enactments)
	rs.enactments = slices.Compact(rs.enactments)
	return nil
}

// rebuildReason tells why pool must be rebuilt before it serves, or "".
// What this process did to the pool comes from its memory, not from the
// cached condition, which may lag behind its own writes. Addresses recorded
// but missing from the bitmap are confirmed on the API server first: the
// cache may still show a record that is gone.
func (r *Reconciler) rebuildReason(ctx context.Context, pool *ippoolv1.NodeIPPool, v view, rs resets, unreadable error) (string, error) {
	m := r.remember(pool)
	c := conditionOf(pool)
	switch {
	case !rs.empty():
		return fmt.Sprintf("the %s annotation on %s", ippoolv1.ResetIPPoolAnnotation, describe(rs.annotated)), nil
	case m.refused:
		return "the pool is no longer refused", nil
	case m.rebuilt:
		// Rebuilt by this process: only the index itself can call for more.
	case c == nil:
		return "the pool is new", nil
	case c.Reason == ippoolv1.ReasonReconcilingPool || c.Reason == ippoolv1.ReasonUnsyncronizedIPPool:
		return "the last rebuild did not finish", nil
	default:
		return "the controller started", nil
	}
	switch {
	case rangeMoved(pool, unreadable):
		return fmt.Sprintf("%s (generation %d)", rangeChange(pool), pool.Generation), nil
	case unreadable != nil:
		return fmt.Sprintf("status.allocatedOffsets is unreadable (%v)", unreadable), nil
	case !poolstatus.Vouched(pool):
		return r.confirmUnvouched(ctx, pool)
	case len(v.audit.Missing) > 0:
		return r.confirmMissing(ctx, pool)
	}
	return "", nil
}

// rangeMoved reports whether a bitmap could not be restored only because
// the range changed under it: the snapshot names another range (its
// fingerprint), and the stamp vouches that the bitmap itself is as its
// writers left it.
func rangeMoved(pool *ippoolv1.NodeIPPool, unreadable error) bool {
	return errors.Is(unreadable, ippool.ErrSnapshotMismatch) && poolstatus.Vouched(pool)
}

// rangeChange describes how the pool's range changed since its status was
// written: "the range changed from A-B to C-D", or "the excludes of A-B
// changed" when only they did.
func rangeChange(pool *ippoolv1.NodeIPPool) string {
	from, to := pool.Status.Start+"-"+pool.Status.End, describeRange(pool)
	if from == to {
		return "the excludes of the range " + to + " changed"
	}
	return "the range changed from " + from + " to " + to
}

// describeRange describes the pool's effective range, defaults included.
func describeRange(pool *ippoolv1.NodeIPPool) string {
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return "an unusable range"
	}
	return fmt.Sprintf("%s-%s", rng.Start(), rng.End())
}

// confirmUnvouched re-reads the pool from the API server and tells whether
// its status really does not match its stamp (the cache may lag behind a
// rebuild that vouched for it already).
func (r *Reconciler) confirmUnvouched(ctx context.Context, pool *ippoolv1.NodeIPPool) (string, error) {
	var fresh ippoolv1.NodeIPPool
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: pool.Name}, &fresh); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if poolstatus.Vouched(&fresh) {
		return "", nil
	}
	return "its status does not match its stamp", nil
}

// confirmMissing re-reads the pool and the enactments from the API server
// and, if recorded addresses really are missing from the bitmap, says so
// with an Event: someone cleared bits that are in use.
func (r *Reconciler) confirmMissing(ctx context.Context, pool *ippoolv1.NodeIPPool) (string, error) {
	var fresh ippoolv1.NodeIPPool
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: pool.Name}, &fresh); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	enactments, err := r.enactmentsFromAPI(ctx)
	if err != nil {
		return "", err
	}
	alloc, err := poolstatus.Allocator(&fresh)
	if err != nil {
		return fmt.Sprintf("the pool cannot be read (%v)", err), nil
	}
	missing := viewOf(fresh.Name, alloc, enactments).audit.Missing
	if len(missing) == 0 {
		return "", nil
	}
	why := fmt.Sprintf("the bitmap lacks %d addresses that enactments record (%s)", len(missing), listNames(poolstatus.AddrStrings(missing), 5))
	r.Recorder.Eventf(&fresh, nil, corev1.EventTypeWarning, ippoolv1.ReasonIndexRepaired, "Rebuild", "Rebuilding: %s", why)
	return why, nil
}

// rebuild stops allocation, applies the resets, sets every claimed bit,
// reports collisions and addresses outside the range, and opens the pool
// again. A failure leaves the pool UnsyncronizedIPPool and is retried.
func (r *Reconciler) rebuild(ctx context.Context, pool *ippoolv1.NodeIPPool, rs resets, why string) error {
	log := ctrl.LoggerFrom(ctx)
	log.Info("rebuilding pool", "reason", why)
	m := r.remember(pool)
	m.rebuilt = false
	if err := r.setAvailable(ctx, pool, reconciling); err != nil {
		return err
	}
	if err := r.rebuildFromEnactments(ctx, pool, rs); err != nil {
		msg := fmt.Sprintf("Failed re constructing the IP pool, it may be not in sync with nodes: %v; the controller retries", err)
		if werr := r.setAvailable(ctx, pool, refused(ippoolv1.ReasonUnsyncronizedIPPool, msg)); werr != nil {
			log.Error(werr, "could not report the failed rebuild")
		}
		return err
	}
	if err := r.clearResetAnnotations(ctx, rs.annotated); err != nil {
		return err
	}
	m.rebuilt, m.refused = true, false
	r.Metrics.rebuilt(pool.Name)
	return nil
}

// rebuildFromEnactments drops the reset scopes' records, then sets every
// bit the enactments on the API server claim, in one guarded write that
// unions with whatever handlers wrote meanwhile. It never clears a bit: a
// handler writes the pool before its enactment, so an unclaimed bit may be
// an allocation in flight; garbage collection deals with the rest.
func (r *Reconciler) rebuildFromEnactments(ctx context.Context, pool *ippoolv1.NodeIPPool, rs resets) error {
	if err := r.dropRecords(ctx, pool, rs.enactments); err != nil {
		return err
	}
	enactments, err := r.enactmentsFromAPI(ctx)
	if err != nil {
		return err
	}
	carried, err := r.carriedAddresses(ctx)
	if err != nil {
		return err
	}
	var set int
	var v view
	var distrusted bool
	var strays []string
	// discarded is the error of a bitmap the writer could not restore in
	// the current attempt, and unreadable what the attempt made of it.
	var discarded, unreadable error
	var moved string
	vouch := poolwrite.Vouch(func(err error) { discarded = err })
	err = r.writeStatus(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (conditionSet, bool, error) {
		unreadable, discarded, moved = discarded, nil, ""
		if rangeMoved(p, unreadable) {
			// The offsets of the old range mean nothing in the new one:
			// the bitmap is rebuilt from records and entries, which name
			// addresses.
			moved, unreadable = rangeChange(p), nil
		}
		distrusted = false
		if !poolstatus.Vouched(p) {
			// A new pool has nothing to distrust; any other status that
			// does not match its stamp was written by someone else.
			distrusted = p.Status.Stamp != "" || p.Status.AllocatedOffsets != "" || len(p.Status.InFlight)+len(p.Status.Quarantined) > 0
			// Not written by us: trust only what the enactments record and
			// the entries that say who holds what.
			alloc.Clear()
		}
		set = setEntries(p, alloc)
		v = viewOf(p.Name, alloc, enactments)
		set += setMissing(alloc, v.audit.Missing)
		v.audit.Missing = nil
		strays = quarantineStrays(p, alloc, v.claims, carried, metav1.NewTime(r.Clock.Now().Truncate(time.Second)))
		return conditionSet{ippoolv1.ConditionAvailable: availabilityOf(p, alloc, v)}, true, nil
	}, vouch)
	if err != nil {
		return err
	}
	r.reportRebuild(pool, moved, unreadable, strays, distrusted)
	r.reportOutside(pool, v)
	ctrl.LoggerFrom(ctx).Info("rebuilt pool", "set", set, "allocated", pool.Status.Allocated,
		"collisions", len(v.audit.Collisions), "outside", len(v.audit.Outside), "unclaimed", len(v.audit.Unclaimed))
	return nil
}

// reportRebuild raises the Events of a finished rebuild: the range change
// it was done for (moved, see rangeChange), the unreadable bitmap it
// discarded, the
// stray addresses it quarantined, the status it did not trust.
func (r *Reconciler) reportRebuild(pool *ippoolv1.NodeIPPool, moved string, unreadable error, strays []string, distrusted bool) {
	switch {
	case moved != "":
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, ippoolv1.ReasonRangeChanged, "Rebuild",
			"%s: rebuilt from the enactments, %d addresses allocated at their offsets in the new range",
			strings.ToUpper(moved[:1])+moved[1:], pool.Status.Allocated)
	case unreadable != nil:
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ippoolv1.ReasonUnsyncronizedIPPool, "Rebuild",
			"Discarded an unreadable status.allocatedOffsets (%v); rebuilt from the enactments", unreadable)
	}
	if len(strays) > 0 {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressQuarantined, "Rebuild",
			"Quarantined %s: carried by a node's network but recorded by no enactment (its pool was deleted, or a record was lost)",
			listNames(strays, 10))
	}
	if distrusted {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ippoolv1.ReasonUnvouchedStatus, "Rebuild",
			"Rebuilt from the enactments: status.allocatedOffsets, inFlight or quarantined had been changed by someone other than "+
				"the pool controller and the handlers (its stamp did not match), so only recorded, in-flight and quarantined addresses were kept")
	}
}

// carriedAddresses maps every static address the nodes' NodeNetworkStates
// show to the node that carries it.
func (r *Reconciler) carriedAddresses(ctx context.Context) (map[netip.Addr]string, error) {
	var list nncev1beta1.NodeNetworkStateList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list NodeNetworkStates: %w", err)
	}
	out := map[netip.Addr]string{}
	for _, nns := range list.Items {
		for ip := range nmstatectl.Carriers(nns.Status.CurrentState.Raw) {
			out[ip] = nns.Name
		}
	}
	return out, nil
}

// quarantineStrays quarantines the addresses of the range that a node
// carries but no enactment records and no entry holds: the quarantine of a
// deleted pool, or a record lost by hand. It returns them, described.
func quarantineStrays(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, claims poolstatus.Claims,
	carried map[netip.Addr]string, now metav1.Time) []string {
	var strays []string
	for _, ip := range slices.SortedFunc(maps.Keys(carried), netip.Addr.Compare) {
		s := ip.String()
		if _, err := alloc.Range().Assignable(ip); err != nil || len(claims[ip]) > 0 ||
			poolstatus.InFlightOf(pool, s) != nil || poolstatus.QuarantineOf(pool, s) != nil {
			continue
		}
		if err := alloc.AllocateIP(ip); err != nil && !errors.Is(err, ippool.ErrAllocated) {
			continue
		}
		poolstatus.AddQuarantine(pool, ippoolv1.QuarantinedAddress{IP: s, Node: carried[ip], Since: now})
		strays = append(strays, s+" on node "+carried[ip])
	}
	return strays
}

// setEntries sets the bits of in-flight and quarantined addresses, which
// a rebuild keeps, and returns how many it set.
func setEntries(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) int {
	set := 0
	hold := func(s string) {
		if ip, err := netip.ParseAddr(s); err == nil && alloc.AllocateIP(ip) == nil {
			set++
		}
	}
	for _, e := range pool.Status.InFlight {
		hold(e.IP)
	}
	for _, q := range pool.Status.Quarantined {
		hold(q.IP)
	}
	return set
}

// setMissing sets the bits of claimed addresses and returns how many.
func setMissing(alloc *ippool.Allocator, missing []netip.Addr) int {
	set := 0
	for _, ip := range missing {
		if alloc.AllocateIP(ip) == nil {
			set++
		}
	}
	return set
}

// dropRecords drops pool's addresses from the reset enactments, with an
// Event on each.
func (r *Reconciler) dropRecords(ctx context.Context, pool *ippoolv1.NodeIPPool, enactments []string) error {
	for _, name := range enactments {
		dropped, err := retire.Drop(ctx, r.Pools, name, pool.Name)
		if err != nil {
			return err
		}
		if len(dropped) == 0 {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("dropped addresses for a reset", "enactment", name, "ips", dropped)
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
		e.Name = name
		r.Recorder.Eventf(e, pool, corev1.EventTypeNormal, ippoolv1.ReasonAddressesDropped, "Reset",
			"Dropped %s of NodeIPPool %s for the %s annotation; the handler allocates again",
			strings.Join(dropped, ", "), pool.Name, ippoolv1.ResetIPPoolAnnotation)
	}
	return nil
}

// reportOutside tells of claims the range no longer hands out; their
// handlers allocate again.
func (r *Reconciler) reportOutside(pool *ippoolv1.NodeIPPool, v view) {
	if len(v.audit.Outside) == 0 {
		return
	}
	parts := make([]string, 0, len(v.audit.Outside))
	for _, ip := range v.audit.Outside {
		for _, o := range v.claims[ip] {
			parts = append(parts, fmt.Sprintf("%s at %s", ip, o))
		}
	}
	r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressOutsideRange, "Rebuild",
		"Enactments hold addresses this range no longer hands out; their handlers allocate again: %s", listNames(parts, 10))
}

// clearResetAnnotations removes the reset annotation from every object
// that asked for this work, unless its value changed meanwhile.
func (r *Reconciler) clearResetAnnotations(ctx context.Context, annotated []client.Object) error {
	for _, o := range annotated {
		if err := annotations.RemoveAnnotation(ctx, r.Client, o, ippoolv1.ResetIPPoolAnnotation); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("reset done", "object", describe([]client.Object{o}))
	}
	return nil
}

// describe names objects for messages: "NodeIPPool traffic-1, enactment
// node01.static-ip".
func describe(objs []client.Object) string {
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		kind := "object"
		switch o.(type) {
		case *ippoolv1.NodeIPPool:
			kind = "NodeIPPool"
		case *nncev1beta1.NodeNetworkConfigurationEnactment:
			kind = "enactment"
		case *nmstatev1.NodeNetworkConfigurationPolicy:
			kind = "policy"
		}
		names = append(names, kind+" "+o.GetName())
	}
	return strings.Join(names, ", ")
}

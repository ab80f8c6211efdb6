package handler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// allocation is the result of serving a policy's ippool captures.
type allocation struct {
	// addresses holds the address of every ippool capture.
	addresses map[string]capture.Address
	// fresh lists, by pool, the addresses newly taken by this reconcile:
	// written to the pools with in-flight entries but not yet recorded in
	// the enactment.
	fresh map[string][]string
	// enactment and token identify the in-flight entries of fresh: the
	// enactment's name and the resourceVersion the record is written
	// under.
	enactment, token string
	// uids are the UIDs of the pools fresh was taken from: a withdrawal
	// touches no later incarnation.
	uids map[string]types.UID
	// moved describes recorded addresses that were replaced because their
	// pool no longer hands them out.
	moved []string
	// notes hold, by pool, what the enactment is told of its fresh
	// addresses (assign.Notes).
	notes map[string]assign.Notes
}

// allocate serves every ippool capture of the policy, one pool at a time.
// A non-nil outcome means the enactment must wait (Pending) or cannot
// proceed (Failing). When a later pool blocks or fails, the addresses
// already taken from earlier pools are given back, so nothing stays
// allocated that no enactment records.
func (r *Reconciler) allocate(ctx context.Context, s *scope) (*allocation, *outcome, error) {
	e, captures := s.enactment, s.captures
	if enactmentrecord.Requesting(e) && s.recordsComplete() {
		return servedOnRequest(e, captures), nil, nil
	}
	if o := r.blockedBeforeTaking(ctx, e, captures); o != nil {
		return nil, o, nil
	}
	a := &allocation{addresses: map[string]capture.Address{}, fresh: map[string][]string{}, notes: map[string]assign.Notes{},
		enactment: e.Name, token: e.ResourceVersion, uids: map[string]types.UID{}}
	for _, pool := range captures.Pools() {
		plan, blocked, err := r.allocateFromPool(ctx, s.policy, e, pool, captures.RefsOf(pool))
		if err != nil || blocked != nil {
			r.withdraw(ctx, a)
			return nil, blocked, err
		}
		maps.Copy(a.addresses, plan.addresses)
		for _, name := range plan.fresh {
			a.fresh[pool] = append(a.fresh[pool], plan.addresses[name].IP.String())
		}
		if plan.source != nil {
			a.uids[pool] = plan.source.UID
		}
		a.moved = append(a.moved, plan.moved...)
		a.notes[pool] = plan.notes
	}
	return a, nil, nil
}

// servedOnRequest returns the allocation of a new enactment whose handler
// has written nothing since it asked (enactmentrecord.Requesting) and which records
// every capture: the pool controller recorded them in answer to the
// request, after the pool write that set their bits and from the ranges
// as they are, so there is nothing to check in the pools. Reading them
// here would cost a thousand nodes a thousand reads of a pool that holds
// a thousand in-flight entries at that moment; the pool controller's audit
// still rebuilds a pool whose bitmap lost a recorded address.
func servedOnRequest(e *nncev1beta1.NodeNetworkConfigurationEnactment, captures capture.Captures) *allocation {
	return &allocation{addresses: recordedAddresses(e, captures), fresh: map[string][]string{}, enactment: e.Name, token: e.ResourceVersion}
}

// recordedAddresses returns the address the enactment records for each
// capture that has one.
func recordedAddresses(e *nncev1beta1.NodeNetworkConfigurationEnactment, captures capture.Captures) map[string]capture.Address {
	out := map[string]capture.Address{}
	for _, ref := range captures.Refs {
		if addr, ok := enactmentrecord.Of(e, ref); ok {
			out[ref.Capture] = addr
		}
	}
	return out
}

// blockedBeforeTaking returns the outcome of a policy that needs a new
// address from a pool that is missing or not available, before anything
// is taken from its other pools: a policy that would wait on one pool does
// not take and give back addresses of the others at every retry. It is
// only a precheck: the pool writes decide on their own reads.
func (r *Reconciler) blockedBeforeTaking(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, captures capture.Captures) *outcome {
	if len(captures.Pools()) < 2 {
		return nil
	}
	for _, name := range captures.Pools() {
		var pool ippoolv1.NodeIPPool
		err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, &pool)
		if apierrors.IsNotFound(err) {
			o, _ := r.poolOutcome(name, captures.RefsOf(name), err)
			return o
		}
		if err != nil {
			continue
		}
		alloc, err := poolstatus.Allocator(&pool)
		if err != nil || len(planPool(e, &pool, alloc, captures.RefsOf(name)).fresh) == 0 {
			continue
		}
		if why := poolstatus.Unservable(&pool); why != "" && !r.asksRebuilding(&pool) {
			o := pending(ippoolv1.ReasonIPPoolNotAvailable, why, r.PendingRequeue)
			o.waitingFor = name
			return &o
		}
	}
	return nil
}

// withdraw gives back the fresh addresses of an allocation that will not be
// recorded. Only call it when the record has certainly not been written. It
// clears only bits whose in-flight entry still carries this allocation's
// token, so an address the pool controller revoked (and maybe handed to
// another node since) is never cleared; a failure leaves the entries to the
// pool controller.
func (r *Reconciler) withdraw(ctx context.Context, a *allocation) {
	for pool, ips := range a.fresh {
		if _, err := r.Pools.Withdraw(ctx, pool, a.enactment, a.token, ips, poolwrite.Incarnation(a.uids[pool])); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "could not give back unrecorded addresses; the pool controller will revoke them", "pool", pool, "ips", ips)
		}
	}
}

// allocateFromPool serves the captures refs of one pool. A handler that
// only asks (the default) reads the pool, to report a missing,
// unavailable or full pool itself, and leaves new addresses, replacements
// of addresses the range no longer hands out, and missing bits to the
// pool controller (Pending / IPPoolBusy). One that SelfAllocates makes at
// most one successful pool write, retried on conflicts by r.Pools.
func (r *Reconciler) allocateFromPool(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, poolName string, refs []capture.Ref) (*poolPlan, *outcome, error) {
	var (
		plan     *poolPlan
		blocked  *outcome
		deferred bool
	)
	who, err := r.asker(ctx, policy, e, poolName)
	if err != nil {
		return nil, nil, err
	}
	mutate := func(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		vouched := poolstatus.Vouched(pool) // before the plan changes pool
		plan, blocked = r.planWrite(ctx, policy, e, pool, alloc, refs, who)
		if blocked != nil || !plan.needsWrite() {
			return false, nil
		}
		if !r.SelfAllocate {
			// The pool controller's audit sets missing bits of recorded
			// addresses; it serves new ones, once it vouches for the
			// bitmap they are taken from.
			if len(plan.fresh) > 0 && !vouched && !r.asksRebuilding(pool) {
				return false, fmt.Errorf("NodeIPPool %q: %w; the pool controller must rebuild it", pool.Name, poolwrite.ErrUnvouched)
			}
			deferred = len(plan.fresh) > 0
			return false, nil
		}
		if len(plan.unconfirmed) > 0 {
			// The node carries an address of the pool that the pool
			// has set and no entry holds, or holds in flight to this
			// enactment: only the pool controller, which reads every
			// holder's records, can tell whether it is the node's to
			// keep (assign.Taken.Unconfirmed).
			deferred = true
			return false, nil
		}
		r.Metrics.attempt(poolName)
		return true, nil
	}
	// Most enacts only read the pool (their record is indexed, or they
	// defer): a thousand nodes doing so at once read it from the API
	// server's watch cache. A write decided on a stale copy conflicts and
	// is decided again on the latest one.
	ctx = audit.WithReason(ctx, "SelfAllocated", "the node's handler takes it for its enactment (--self-allocate)")
	attempts, err := r.Pools.Update(ctx, poolName, mutate, poolwrite.FromWatchCache())
	if !deferred && (apierrors.IsNotFound(err) || errors.Is(err, poolwrite.ErrUnvouched) || blocked != nil) {
		// The watch cache may be behind: a missing, unavailable, full or
		// unvouched pool is confirmed on the latest copy before it is
		// reported.
		attempts, err = r.Pools.Update(ctx, poolName, mutate)
	}
	if deferred || errors.Is(err, poolwrite.ErrRetriesExhausted) {
		r.warnIfUnserved(e, poolName)
		o := pending(ippoolv1.ReasonIPPoolBusy, r.askedMessage(poolName, plan), r.FailedRequeue)
		o.waitingFor = poolName
		if deferred && e.Status.WaitingForIPPool != poolName {
			r.reportMoved(e, plan.moved)
		}
		return nil, &o, nil
	}
	if err != nil {
		o, err := r.poolOutcome(poolName, refs, err)
		return nil, o, err
	}
	if blocked != nil {
		return nil, blocked, nil
	}
	if plan.needsWrite() {
		r.logAllocations(ctx, plan, refs, attempts)
	}
	return plan, nil, nil
}

// askedMessage is the Pending / IPPoolBusy message of an enactment that
// asks the pool controller for addresses from pool; plan, when set, says
// which recorded addresses are replaced. It stays the same from one look
// to the next: a status write would change the enactment's
// resourceVersion, the token the controller serves it under.
func (r *Reconciler) askedMessage(pool string, plan *poolPlan) string {
	msg := fmt.Sprintf("NodeIPPool %q: the pool controller allocates for node %s, with the other nodes that wait, in one pool write", pool, r.NodeName)
	if plan == nil {
		return msg
	}
	if len(plan.unconfirmed) > 0 {
		msg += fmt.Sprintf(" (for capture %s, the node carries an address that the pool has set and that no record this handler can read names: "+
			"the pool controller, which reads every holder's records, gives it back once no entry holds it if no record names it "+
			"and no other node carries it, or another address otherwise)", strings.Join(plan.unconfirmed, ", "))
	}
	return msg + movedNote(plan.moved)
}

// warnIfUnserved raises a Warning Event on an enactment that has asked the
// pool controller for longer than UnservedWarning: the controller may be
// down. The Event, not the condition, says so, so that the enactment is
// not written while the controller may be serving it.
func (r *Reconciler) warnIfUnserved(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) {
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionPending)
	if e.Status.WaitingForIPPool != pool || c == nil || c.Status != corev1.ConditionTrue || string(c.Reason) != ippoolv1.ReasonIPPoolBusy ||
		r.Clock.Since(c.LastTransitionTime.Time) <= r.UnservedWarning {
		return
	}
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}
	r.Recorder.Eventf(e, p, corev1.EventTypeWarning, ippoolv1.ReasonNotServed, "Allocate",
		"NodeIPPool %s: node %s has waited for the pool controller since %s: check that it runs (Deployment nmstate-ippool-pool-controller)",
		pool, r.NodeName, c.LastTransitionTime.UTC().Format(time.RFC3339))
}

// planWrite decides what one attempt writes to the pool: nothing when the
// recorded addresses are all indexed, otherwise the plan applied to alloc.
// A pool that is not available lets reused addresses through (its rebuild
// sets their bits) but blocks new ones.
func (r *Reconciler) planWrite(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator,
	refs []capture.Ref, who assign.Asker) (*poolPlan, *outcome) {
	plan := planPool(e, pool, alloc, refs)
	if !plan.needsWrite() {
		return plan, nil
	}
	if len(plan.fresh) > 0 {
		// A template that reads what the pool does not set can never
		// render: it takes no address while it waits to be fixed.
		if o := r.templateBlocked(policy, pool, alloc.Range(), refs); o != nil {
			return nil, o
		}
	}
	if why := poolstatus.Unservable(pool); why != "" {
		if len(plan.fresh) == 0 {
			plan.unsetBits = nil
			return plan, nil
		}
		if r.asksRebuilding(pool) {
			return plan, nil
		}
		o := pending(ippoolv1.ReasonIPPoolNotAvailable, why, r.PendingRequeue)
		o.waitingFor = pool.Name
		return nil, &o
	}
	if !r.SelfAllocate && len(plan.fresh) > 0 && len(assign.Resumable(pool, assign.Ask{Asker: who, Token: e.ResourceVersion})) > 0 {
		// The pool controller has taken addresses for this enactment
		// already, and its record is on the way (this handler's cache
		// has not shown it yet). Judged without them, the pool may look
		// full; a status write saying so would change the token the
		// record is written under, and the record would be refused and
		// its addresses withdrawn. The handler goes on asking.
		return plan, nil
	}
	if err := plan.apply(alloc, who, e.ResourceVersion, metav1.NewTime(r.Clock.Now().Truncate(time.Second))); err != nil {
		if r.SelfAllocate && len(plan.unconfirmed) > 0 {
			return plan, nil // full but for what the node may carry as its own: the pool controller tells
		}
		return nil, r.exhausted(ctx, policy, pool, err)
	}
	return plan, nil
}

// asksRebuilding reports whether this handler asks the pool controller
// for new addresses of a pool the controller has not looked at yet or is
// rebuilding (a pool created with the policy, reset, or after the
// controller restarted): it serves the asks that wait for the pool once
// the rebuild is done. Reported as not available instead, each node would
// wait for the controller to nudge it once the pool is, and then ask: two
// writes more for every node of the rollout, and a round trip more. A
// handler that takes its own addresses (SelfAllocate) waits for the pool
// to be available.
func (r *Reconciler) asksRebuilding(pool *ippoolv1.NodeIPPool) bool {
	return !r.SelfAllocate && poolstatus.Rebuilding(pool)
}

// templateBlocked returns the Failing outcome of a policy whose template
// reads a field (gateway, DNS) that the captures refs of pool do not give,
// or nil. It is looked at again after FailedRequeue: the pool may have been
// fixed meanwhile.
func (r *Reconciler) templateBlocked(policy *nmstatev1.NodeNetworkConfigurationPolicy, pool *ippoolv1.NodeIPPool,
	rng *ippool.Range, refs []capture.Ref) *outcome {
	err := capture.Missing(capture.Needs(policy.Spec.DesiredState.Raw, refs), pool.Name, poolstatus.Address(pool, rng, rng.Start()))
	if err == nil {
		return nil
	}
	o := failing(ippoolv1.ReasonInvalidCapture, err.Error())
	o.requeueAfter = r.FailedRequeue
	return &o
}

// asker describes this node's enactment of policy to the chooser of
// pool, with the node's labels read from the cache now, before any pool
// write's mutation runs: a reservation may select nodes by label.
func (r *Reconciler) asker(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) (assign.Asker, error) {
	var labels map[string]string
	if n, err := r.node(ctx, r.Client); err == nil {
		labels = n.Labels
	}
	cl := assign.Asker{Holder: holder.ForEnactment(e.Name), Node: r.NodeName, Policy: policy.Name,
		Labels: func() map[string]string { return labels }}
	if r.SelfAllocate {
		return r.withCarried(ctx, cl, policy, e, pool)
	}
	return cl, nil
}

// withCarried tells the chooser what this node carries, read as every
// kind reads it (lifecycle.ReadCarrying: the pool controller and the
// companion choose from the same), on the interfaces the policy's
// template puts each capture's address on, for a capture that never had
// an address (adoption); what the node's enactments hold already; and,
// when the node carries an address of the pool's range, which other nodes
// carry what: a free address is adopted only if no other node's state
// shows it. What cannot be read is an error, tried again: allocating
// without it would renumber what the node carries. A pool that is gone
// adopts nothing (the pool write reports it).
func (r *Reconciler) withCarried(ctx context.Context, cl assign.Asker, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	e *nncev1beta1.NodeNetworkConfigurationEnactment, poolName string) (assign.Asker, error) {
	captures, err := capture.Parse(policy.Spec.Capture)
	if err != nil || !slices.ContainsFunc(captures.RefsOf(poolName), func(ref capture.Ref) bool {
		_, had := e.Status.CapturedStates[ref.Capture]
		return !had
	}) {
		return cl, nil // every capture of the pool had an address: nothing to adopt
	}
	var pool ippoolv1.NodeIPPool
	err = r.APIReader.Get(ctx, types.NamespacedName{Name: poolName}, &pool, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	switch {
	case apierrors.IsNotFound(err):
		return cl, nil
	case err != nil:
		return cl, fmt.Errorf("read NodeIPPool %s, for what node %s carries: %w", poolName, r.NodeName, err)
	}
	enactments, err := r.nodeEnactments(ctx)
	if err != nil {
		return cl, err
	}
	c, err := lifecycle.ReadCarrying(ctx, r.APIReader, &pool, []string{r.NodeName}, holder.OfEnactments(enactments))
	if err != nil {
		return cl, err
	}
	return c.Adopting(cl, func(captureName string) []string {
		if _, had := e.Status.CapturedStates[captureName]; had {
			return nil
		}
		return capture.Interfaces(policy.Spec.DesiredState.Raw, captureName)
	}), nil
}

// poolOutcome turns a failed pool read into the enactment's outcome, or
// returns the error to retry.
func (r *Reconciler) poolOutcome(name string, refs []capture.Ref, err error) (*outcome, error) {
	var o outcome
	switch {
	case apierrors.IsNotFound(err):
		o = failing(ippoolv1.ReasonIPPoolNotFound, fmt.Sprintf("NodeIPPool %q not found: create it, or fix capture %q", name, refs[0].Capture))
	case errors.Is(err, ippool.ErrInvalidRange):
		o = failing(ippoolv1.ReasonIPPoolInvalid, fmt.Sprintf("NodeIPPool %q cannot hand out addresses: %v", name, err))
	case errors.Is(err, poolwrite.ErrUnreadable), errors.Is(err, poolwrite.ErrUnvouched):
		o = pending(ippoolv1.ReasonIPPoolNotAvailable,
			fmt.Sprintf("NodeIPPool %q: new addresses wait until the pool controller has rebuilt the pool from its holders' records: %v", name, err),
			r.PendingRequeue)
	default:
		return nil, fmt.Errorf("allocate from NodeIPPool %q: %w", name, err)
	}
	// The pool controller nudges the enactment when the pool can serve;
	// the requeue is the fallback.
	o.waitingFor = name
	if o.requeueAfter == 0 {
		o.requeueAfter = r.FailedRequeue
	}
	return &o, nil
}

// exhausted turns a failed plan into a Failing outcome and tells the admin.
func (r *Reconciler) exhausted(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	pool *ippoolv1.NodeIPPool, err error) *outcome {
	var ex *errExhausted
	if !errors.As(err, &ex) {
		o := failing(ippoolv1.ReasonIPPoolInvalid, fmt.Sprintf("allocate from NodeIPPool %q: %v", pool.Name, err))
		return &o
	}
	msg := fmt.Sprintf("%s (node %s, policy %s)", ex.Error(), r.NodeName, policy.Name)
	r.Recorder.Eventf(pool, policy, corev1.EventTypeWarning, ippoolv1.ReasonExhaustedIPPool, "Allocate", msg)
	ctrl.LoggerFrom(ctx).Info("pool exhausted", "pool", pool.Name, "size", ex.size)
	o := failing(ippoolv1.ReasonIPPoolExhausted, ex.Error())
	o.waitingFor, o.requeueAfter = pool.Name, r.FailedRequeue
	return &o
}

func (r *Reconciler) logAllocations(ctx context.Context, plan *poolPlan, refs []capture.Ref, attempts int) {
	log := ctrl.LoggerFrom(ctx)
	for _, ref := range refs {
		if slices.Contains(plan.fresh, ref.Capture) {
			log.Info("allocated address", "pool", plan.pool, "capture", ref.Capture,
				"ip", plan.addresses[ref.Capture].IP.String(), "attempts", attempts)
		}
	}
	if len(plan.unsetBits) > 0 {
		log.Info("restored the bits of recorded addresses", "pool", plan.pool, "count", len(plan.unsetBits), "attempts", attempts)
	}
}

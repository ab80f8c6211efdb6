package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/annotations"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// NetworkState reads and applies the node's network state.
// nmstatectl.Runner implements it.
type NetworkState interface {
	// Show returns the current state (JSON or YAML).
	Show(ctx context.Context) ([]byte, error)
	// Apply applies a desired state under a checkpoint that Commit makes
	// permanent and Rollback undoes; a failed Apply changed nothing.
	Apply(ctx context.Context, desired []byte) error
	// Commit makes the last Apply permanent.
	Commit(ctx context.Context) error
	// Rollback undoes the last uncommitted Apply; it fails when there is
	// none.
	Rollback(ctx context.Context) error
}

// Reconciler reconciles NodeNetworkConfigurationPolicies for one node. Every
// field is set by the caller; see New for defaults.
type Reconciler struct {
	// Client reads from the manager's cache, which holds the policies, this
	// node and this node's enactments only (CacheOptions), and writes to
	// the API server.
	Client client.Client
	// APIReader reads from the API server: pools, and the enactment and
	// policy before anything is decided that a stale cache could get wrong.
	APIReader client.Reader
	// NodeName is the node this handler configures.
	NodeName string
	// State reads and applies the node's network state.
	State NetworkState
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Clock tells the time and waits.
	Clock clock.Clock
	// Pools writes pool statuses and gives addresses back, retrying
	// conflicting writes with its backoff.
	Pools *poolwrite.Writer
	// Metrics counts allocation attempts and conflicts.
	Metrics *Metrics
	// SelfAllocate makes the handler take new addresses from the pools
	// itself, as the specification describes: it writes the pool's status
	// (bits and in-flight entries for its own enactments), retrying
	// conflicts with Pools.Backoff. When false (the default), the handler
	// never writes a pool: it asks (Pending / IPPoolBusy), and the pool
	// controller serves every waiting node in one pool write and restores
	// the bits of recorded addresses. Either way the pool controller takes
	// back what the handler releases (status.ippool releasing).
	SelfAllocate bool
	// UnservedWarning is how long an enactment asks the pool controller
	// for addresses before a Warning Event (NotServed) says the controller
	// may not run.
	UnservedWarning time.Duration
	// PendingRequeue is how long to wait before looking again at an
	// enactment that waits on a pool (not available, or new addresses wait
	// for the pool controller's rebuild).
	PendingRequeue time.Duration
	// FailedRequeue is how long an enactment that cannot go on (its pool
	// full, missing or invalid; its template unfillable) waits before it is
	// looked at again, and how long it waits for the pool controller to
	// serve it before its handler asks again (with SelfAllocate, allocates
	// itself). Failed applies follow Retry.
	FailedRequeue time.Duration
	// Retry spaces the attempts to configure a policy generation that
	// failed (render, apply or probe): Steps is how many times a failure
	// is retried, the delays grow from Duration by Factor up to Cap. The
	// count is kept in the enactment (status.failures).
	Retry wait.Backoff
	// Probes check the node after an apply, before it is committed; a
	// failure rolls the apply back.
	Probes probe.Set
	// NetworkLock, if set, is held while the handler checks that its
	// record is current and applies a state; the node's state reporter
	// reads under it (see nodestate.Reconciler.NetworkLock).
	NetworkLock sync.Locker
	// StateChanged, if set, is called after every apply, successful or
	// not (a rollback changes the network too): the node's state reporter
	// reads the state again.
	StateChanged func()
	// StatePublished, if set, reports whether the node's state reporter
	// has published the node's NodeNetworkState since the handler
	// started. Until it has, no address is asked for or taken: a
	// capture's first address is the one the node carries when its state
	// shows one (adoption), and a state missing, or older than what the
	// node carries (after a restore), would give it a new one instead.
	StatePublished func() bool

	// stateWaitSaid is when the handler last said (or first found) that
	// it waits for its node's first publication, in Unix nanoseconds.
	stateWaitSaid atomic.Int64
}

// statePoll is how soon an enactment that waits for the node's first
// publication looks again; a wait longer than stateWaitSay is said at
// Info, every stateWaitSay.
const statePoll, stateWaitSay = 250 * time.Millisecond, 30 * time.Second

// cacheLag is how soon a reconcile whose cached view the API server
// contradicted looks again, by when the cache has caught up.
const cacheLag = 100 * time.Millisecond

// Reconcile brings one policy to this node. It reads from the cache and
// decides (see decide); only a reconcile that has something to do reads
// from the API server or runs nmstatectl.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("node", r.NodeName, "policy", req.Name)
	ctx = ctrl.LoggerInto(ctx, log)

	s, err := r.fetch(ctx, r.Client, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	var res ctrl.Result
	switch s.decide(now, r.timing()) {
	case stepRetire:
		res, err = r.retireIfConfirmed(ctx, req.Name)
	case stepEnact:
		res, err = r.enact(ctx, req.Name)
	case stepApply:
		res, err = r.applyGranted(ctx, req.Name)
	case stepAnswer:
		// On the cached copy: a conflict means the cache was behind.
		if res, err = r.conclude(ctx, s, *s.slotAnswer()); apierrors.IsConflict(err) {
			err = fmt.Errorf("show the policy controller's answer: %w", errCacheBehind)
		}
	case stepWait:
		// A wait for a grant ends with the grant's event; a wait for the
		// pool controller or for a retry must end on time even if no event
		// comes: this reconcile may have replaced the requeue that an
		// earlier one asked for (the queue keeps one entry per policy).
		res = ctrl.Result{RequeueAfter: waitLeft(s.enactment, now, r.timing())}
	}
	if errors.Is(err, errCacheBehind) || apierrors.IsAlreadyExists(err) {
		log.V(1).Info("the cache was behind; deciding again", "why", err.Error())
		return ctrl.Result{RequeueAfter: cacheLag}, nil
	}
	return res, err
}

// scope is one reconcile's view of a policy on this node.
type scope struct {
	// policy is nil when it does not exist.
	policy *nmstatev1.NodeNetworkConfigurationPolicy
	// enactment is this node's enactment of the policy, nil when none.
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment
	// selected tells whether the policy selects this node, and if not why.
	selected bool
	why      string
	// captures are the policy's, parsed; captureErr is why they do not
	// parse.
	captures   capture.Captures
	captureErr error
}

// fetch reads the scope of a policy through reader: the cache for the
// decision, the API server to confirm it.
func (r *Reconciler) fetch(ctx context.Context, reader client.Reader, name string) (*scope, error) {
	s := &scope{}
	var p nmstatev1.NodeNetworkConfigurationPolicy
	switch err := reader.Get(ctx, types.NamespacedName{Name: name}, &p); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get policy %q: %w", name, err)
	default:
		s.policy = &p
		s.captures, s.captureErr = capture.ParsePolicy(p.Spec.Capture, p.Spec.DesiredState.Raw)
	}
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	key := shared.EnactmentKey(r.NodeName, name)
	switch err := reader.Get(ctx, key, &e); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get enactment %q: %w", key.Name, err)
	default:
		s.enactment = &e
	}
	var err error
	s.selected, s.why, err = r.selection(ctx, reader, s.policy)
	if s.selected && s.enactment != nil && enactmentrecord.OfEarlierPolicy(s.enactment, string(s.policy.UID)) {
		s.selected, s.why = false, "its policy was deleted and created again"
	}
	return s, err
}

// errCacheBehind says that the API server's enactment is ahead of what the
// cache shows of it or of its policy: decide again once the cache has
// caught up.
var errCacheBehind = errors.New("the cache is behind the API server")

// confirmed reads the scope of a policy for a step that writes or applies:
// the enactment from the API server, whose resourceVersion guards every
// write of the step; the policy and the Node from the cache, since one a
// moment behind only delays what its own event brings. When the cache has
// no enactment, the step's create confirms that (AlreadyExists).
func (r *Reconciler) confirmed(ctx context.Context, name string) (*scope, error) {
	s, err := r.fetch(ctx, r.Client, name)
	if err != nil || s.enactment == nil {
		return s, err
	}
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.enactment), &e); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("enactment %q is gone: %w", s.enactment.Name, errCacheBehind)
	case err != nil:
		return nil, fmt.Errorf("get enactment %q: %w", s.enactment.Name, err)
	}
	if s.policy != nil && e.Status.PolicyGeneration > s.policy.Generation {
		return nil, fmt.Errorf("enactment %q shows policy generation %d, the cache %d: %w",
			e.Name, e.Status.PolicyGeneration, s.policy.Generation, errCacheBehind)
	}
	s.enactment = &e
	return s, nil
}

// retireIfConfirmed ends the enactment if the API server confirms what
// the cache said (a stale cache must not take a node's addresses away): it
// deletes it, and the pool controller retires it, releasing its addresses
// in shared pool writes; this node then takes them off when asked for its
// state.
func (r *Reconciler) retireIfConfirmed(ctx context.Context, name string) (ctrl.Result, error) {
	s, err := r.fetch(ctx, r.APIReader, name)
	if err != nil || s.decide(r.Clock.Now(), r.timing()) != stepRetire {
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: cacheLag}, nil
	}
	why := s.why
	if s.selected {
		why = "the enactment is being deleted"
	}
	if err := r.end(ctx, s.enactment, why); err != nil {
		return ctrl.Result{}, err
	}
	if s.selected {
		// Deleted while the policy still selects the node (by hand, or
		// with its Node): start over once it is gone.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// beforeFirstState reports whether s needs addresses it does not record
// while the node's state has not been published since the handler
// started (StatePublished): what the node carries is not known yet.
func (r *Reconciler) beforeFirstState(ctx context.Context, s *scope) bool {
	if len(s.captures.Refs) == 0 || (s.enactment != nil && s.recordsComplete()) || r.StatePublished == nil || r.StatePublished() {
		return false
	}
	now := r.Clock.Now().UnixNano()
	last := r.stateWaitSaid.Load()
	switch {
	case last == 0:
		r.stateWaitSaid.CompareAndSwap(0, now)
		ctrl.LoggerFrom(ctx).V(1).Info("waiting for the node's state to be published before asking for addresses")
	case time.Duration(now-last) > stateWaitSay && r.stateWaitSaid.CompareAndSwap(last, now):
		ctrl.LoggerFrom(ctx).Info("still waiting for the node's NodeNetworkState to be published: no address is asked for " +
			"until what the node carries is known; is 'nmstatectl show' failing? (see the NodeNetworkState's conditions)")
	}
	return true
}

// notToEnact reports whether an enact confirmed on the API server's copies
// is not to go on after all, and what it returns then: the cache the
// reconcile decided on was behind (a retirement or a wait), or a new
// enactment's request waits for its answer.
func notToEnact(s *scope, now time.Time, t timing) (ctrl.Result, bool) {
	switch s.decide(now, t) {
	case stepEnact:
		return ctrl.Result{}, false
	case stepRetire:
		return ctrl.Result{RequeueAfter: cacheLag}, true
	case stepWait:
		return ctrl.Result{RequeueAfter: waitLeft(s.enactment, now, t)}, true
	default: // the cache was behind
		return ctrl.Result{}, true
	}
}

// enact resolves the policy's captures, allocates, records, renders and
// asks for a slot to apply, on the API server's copies. The record reaches
// the API server before the state reaches the node.
func (r *Reconciler) enact(ctx context.Context, name string) (ctrl.Result, error) {
	s, err := r.confirmed(ctx, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	if res, stop := notToEnact(s, now, r.timing()); stop {
		return res, nil
	}
	if r.beforeFirstState(ctx, s) {
		return ctrl.Result{RequeueAfter: statePoll}, nil
	}
	if s.enactment, err = r.ensureEnactment(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if enactmentrecord.Requesting(s.enactment) && !enactmentrecord.RequestsAddresses(s.enactment) {
		// Created with a slot request alone: the policy controller
		// answers it, and the handler asks itself only if no one does.
		if res, stop := notToEnact(s, now, r.timing()); stop {
			return res, nil
		}
	}
	// A pool's nudge is acted on now; removing it first keeps the
	// enactment's resourceVersion, the token of what is allocated below.
	if err := annotations.RemoveAnnotation(ctx, r.Client, s.enactment, ippoolv1.NudgeAnnotation); err != nil {
		return ctrl.Result{}, err
	}
	if s.captureErr != nil {
		return r.conclude(ctx, s, failing(ippoolv1.ReasonInvalidCapture, s.captureErr.Error()))
	}
	alloc, blocked, err := r.allocate(ctx, s)
	if err != nil || blocked != nil {
		return r.concludeBlocked(ctx, s, blocked, err)
	}
	r.reportMoved(s.enactment, alloc.moved)
	r.reportNotes(s.enactment, alloc.notes)
	rendered, err := r.render(ctx, s, alloc.addresses)
	if err != nil {
		writeRecord(s.enactment, s.captures, alloc.addresses, addressStates(alloc.addresses), r.meta())
		o := r.configureFailed(s, err.Error())
		if errors.Is(err, capture.ErrTemplate) {
			// No retry renders it: it waits for the policy or the pool to
			// change, and looks again after FailedRequeue.
			o = failing(ippoolv1.ReasonInvalidCapture, err.Error())
			o.requeueAfter = r.FailedRequeue
		}
		return r.concludeRecorded(ctx, s, alloc, o)
	}
	if alreadyApplied(s.enactment, s.policy, rendered, s.captures, alloc.addresses) {
		return ctrl.Result{}, nil
	}
	writeRecord(s.enactment, s.captures, alloc.addresses, rendered.CapturedStates, r.meta())
	for pool, n := range alloc.notes {
		enactmentrecord.NoteNotAdopted(s.enactment, pool, n.NotAdopted)
	}
	s.enactment.Status.DesiredState = shared.NewState(string(rendered.DesiredState))
	return r.concludeRecorded(ctx, s, alloc, r.askForSlot(s, alloc.moved))
}

// askForSlot sets the enactment's request for a slot to apply what it
// records now, and returns what it shows while it waits. A request of
// this generation that waits in the queue keeps its place (a new
// enactment's request asked at its creation) and shows it; so does a new
// enactment's request that went unanswered. Any other is new.
func (r *Reconciler) askForSlot(s *scope, moved []string) outcome {
	e := s.enactment
	if queued(e) && (e.Status.PolicyGeneration == s.policy.Generation || enactmentrecord.Requesting(e)) {
		if e.Status.Slot.Requested.IsZero() {
			e.Status.Slot.Requested = metav1.NewMicroTime(e.CreationTimestamp.Time)
		}
		o := waitingInQueue()
		o.message += movedNote(moved)
		return o
	}
	asked := r.Clock.Now()
	if enactmentrecord.Requesting(e) {
		asked = e.CreationTimestamp.Time
	}
	e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(asked.Truncate(time.Microsecond))}
	return progressing(enactmentrecord.WaitingForSlot + movedNote(moved))
}

// movedNote is the part of a condition message that tells of replaced
// addresses.
func movedNote(moved []string) string {
	if len(moved) == 0 {
		return ""
	}
	return "; re-allocated because " + strings.Join(moved, "; ")
}

// concludeBlocked reports an allocation that could not proceed: a Pending or
// Failing outcome, or an error to retry. A new enactment whose request the
// pool controller has not had time to serve writes nothing: it waits.
func (r *Reconciler) concludeBlocked(ctx context.Context, s *scope, blocked *outcome, err error) (ctrl.Result, error) {
	if err != nil {
		return ctrl.Result{}, err
	}
	if left := busyLeft(s.enactment, r.Clock.Now(), r.FailedRequeue); blocked.reason == ippoolv1.ReasonIPPoolBusy &&
		enactmentrecord.RequestsAddresses(s.enactment) && left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	return r.conclude(ctx, s, *blocked)
}

// concludeRecorded writes an enactment that now records alloc's fresh
// addresses, and leaves those it no longer uses releasing. The write is
// guarded by the resourceVersion the fresh addresses' in-flight entries
// carry as their token. If the API server refused it (a conflict, or the
// enactment deleted meanwhile), the record certainly does not exist: the
// fresh addresses are withdrawn at once, as the pool controller and the
// companion withdraw theirs, and if the pool controller fenced the
// enactment because the addresses stayed unrecorded too long, that is
// told. After any other error the write may have landed, so they are kept.
func (r *Reconciler) concludeRecorded(ctx context.Context, s *scope, alloc *allocation, o outcome) (ctrl.Result, error) {
	res, err := r.conclude(ctx, s, o)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		r.withdraw(ctx, alloc)
		r.reportRevoked(ctx, alloc)
	}
	return res, err
}

// conclude writes the enactment's conditions for o and requeues as o asks.
func (r *Reconciler) conclude(ctx context.Context, s *scope, o outcome) (ctrl.Result, error) {
	e := s.enactment
	if e.Status.PolicyGeneration != s.policy.Generation {
		// A new generation starts afresh: its own conditions, times and
		// failure count.
		e.Status.Conditions, e.Status.Failures = nil, nil
	}
	switch {
	case o.failures != nil:
		e.Status.Failures = o.failures
	case o.condition == shared.NodeNetworkConfigurationEnactmentConditionAvailable:
		e.Status.Failures = nil
	}
	e.Status.PolicyGeneration = s.policy.Generation
	e.Status.WaitingForIPPool = o.waitingFor
	if !o.keepsSlot() {
		e.Status.Slot = nil
	}
	gaveUp := o.condition == shared.NodeNetworkConfigurationEnactmentConditionFailing &&
		o.reason == shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure &&
		!conditions.IsTrueWith(e.Status.Conditions, o.condition, o.reason)
	if err := r.writeEnactment(ctx, e, o); err != nil {
		return ctrl.Result{}, err
	}
	if gaveUp {
		// kubernetes-nmstate's words, on the policy, where admins look.
		r.Recorder.Eventf(s.policy, e, corev1.EventTypeWarning, ippoolv1.ReasonReconcileFailed, "Enact",
			"reconciliation of enactment %q has failed after %d retries", e.Name, r.Retry.Steps)
	}
	return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
}

func (r *Reconciler) meta() shared.NodeNetworkConfigurationEnactmentMetaInfo {
	return shared.NodeNetworkConfigurationEnactmentMetaInfo{Version: "0", TimeStamp: metav1.NewTime(r.Clock.Now().Truncate(time.Second))}
}

package policy

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/batch"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// parallelWrites bounds the enactment writes a reconcile has in flight.
const parallelWrites = 8

// marksPerPass bounds the queue marks (status.slot.queued) one reconcile
// writes: one round of parallelWrites.
const marksPerPass = parallelWrites

// Defaults used by New.
const (
	// DefaultSlotTimeout is kubernetes-nmstate's: a node may hold a
	// maxUnavailable slot this long before it is taken for dead.
	DefaultSlotTimeout = 5 * time.Minute
)

// Reconciler writes a policy's status and grants its maxUnavailable slots.
// Every field is set by the caller; see New for defaults.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// Clock tells the time.
	Clock clock.Clock
	// Batch is how long events are gathered into one reconcile.
	Batch time.Duration
	// SlotTimeout is how long a grant counts against maxUnavailable.
	SlotTimeout time.Duration
	// Recorder emits Events.
	Recorder events.EventRecorder
}

// FieldOwner is the field manager of every write of the policy controller: the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-policy-controller"

// New returns a Reconciler wired to the manager with the defaults.
func New(mgr ctrl.Manager) *Reconciler {
	return &Reconciler{
		Client:      client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		Clock:       clock.RealClock{},
		Batch:       batch.DefaultDelay,
		SlotTimeout: DefaultSlotTimeout,
		Recorder:    eventnote.New(mgr.GetEventRecorder("nmstate-ippool-pool-controller")),
	}
}

// rollout is one reconcile's view of a policy: what was read and what the
// pure decisions made of it.
type rollout struct {
	policy *nmstatev1.NodeNetworkConfigurationPolicy
	// matching counts the nodes the policy selects; enactments are theirs
	// (a node may have none yet).
	matching   int
	enactments []*nncev1beta1.NodeNetworkConfigurationEnactment
	limit      int
	slots      slots
	conditions shared.ConditionList
}

// Reconcile grants the policy's slots, marks the requests that wait, and
// writes the policy's status if it changed. Writes are guarded by
// resourceVersions; a conflict requeues the policy.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("policy", req.Name))
	ro, err := r.fetch(ctx, req.Name)
	if err != nil || ro == nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	ro.slots = planSlots(ro.enactments, ro.policy.Generation, ro.limit, now, r.SlotTimeout, onRequest(ro.policy))
	if err := r.abort(ctx, ro); err != nil {
		return ctrl.Result{}, err
	}
	granted, err := r.grant(ctx, ro.slots.grant, ro.policy.Generation, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	ro.slots.held += granted
	moreToMark, err := r.queue(ctx, ro.slots.queue, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	ro.conditions = policystatus.Conditions(ro.policy.Status.Conditions,
		policystatus.Summarize(ro.matching, ro.policy.Generation, ro.enactments), now)
	held, err := r.writeStatus(ctx, ro, now)
	switch {
	case apierrors.IsConflict(err):
		// The cached policy was behind: its change queued this policy.
		return ctrl.Result{RequeueAfter: r.Batch}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	var after time.Duration
	if !ro.slots.nextExpiry.IsZero() {
		after = ro.slots.nextExpiry.Sub(now) + time.Second
	}
	if held > 0 && (after == 0 || held < after) {
		after = held
	}
	if moreToMark && (after == 0 || r.Batch < after) {
		after = r.Batch
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// fetch reads the policy, the nodes it selects and their enactments from
// the cache; nil when the policy is gone, or being deleted and draws from
// pools (its handlers retire it). A policy without ippool captures held by
// a finalizer is still applied by its handlers, and rolled out as any.
func (r *Reconciler) fetch(ctx context.Context, name string) (*rollout, error) {
	var p nmstatev1.NodeNetworkConfigurationPolicy
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get policy %q: %w", name, err)
	}
	if !p.DeletionTimestamp.IsZero() && capture.UsesPools(p.Spec.Capture) {
		return nil, nil
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, nodes, client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(p.Spec.NodeSelector)},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the nodes of policy %q: %w", name, err)
	}
	matching := make(map[string]bool, len(nodes.Items))
	for _, n := range nodes.Items {
		matching[n.Name] = true
	}
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	// The items are the cache's own, not copies (every enactment event
	// brings the policy back): answer copies the ones it changes.
	if err := r.Client.List(ctx, &list, client.MatchingFields{policyIndex: name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the enactments of policy %q: %w", name, err)
	}
	ro := &rollout{policy: &p}
	for i := range list.Items {
		e := &list.Items[i]
		if matching[e.Labels[shared.EnactmentNodeLabel]] && e.DeletionTimestamp.IsZero() &&
			// One of an earlier policy of this name, deleted and created
			// again, is neither counted nor granted: its handler ends it
			// and creates one for this policy.
			!enactmentrecord.OfEarlierPolicy(e, string(p.UID)) {
			ro.enactments = append(ro.enactments, e)
		}
	}
	limit, err := policystatus.MaxUnavailable(p.Spec.MaxUnavailable, len(matching))
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", name, err)
	}
	ro.limit, ro.matching = limit, len(matching)
	return ro, nil
}

// onRequest says which new enactments of policy ask for a slot by their
// request (enactmentrecord.AsksForSlot): none when its captures do not parse, as
// its handlers then apply nothing.
func onRequest(policy *nmstatev1.NodeNetworkConfigurationPolicy) func(*nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	captures, err := capture.ParsePolicy(policy.Spec.Capture, policy.Spec.DesiredState.Raw)
	if err != nil {
		return nil
	}
	return func(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
		return enactmentrecord.AsksForSlot(e, captures.Refs)
	}
}

// grant grants the slot requests of enactments, several writes at a time,
// and returns how many it granted. It writes the slot alone: the
// enactment's conditions are its handler's. A request that changed since
// the cache saw it (a conflict) is left to the next reconcile, which its
// change queues.
func (r *Reconciler) grant(ctx context.Context, enactments []*nncev1beta1.NodeNetworkConfigurationEnactment,
	generation int64, now time.Time) (int, error) {
	var granted atomic.Int64
	err := answer(enactments, func(slot *nncev1beta1.ApplySlot) {
		slot.Granted, slot.Queued, slot.Aborted = microNow(now), nil, nil
		slot.PolicyGeneration = generation
	}, func(e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
		err := r.Client.Status().Update(ctx, e)
		if err == nil {
			granted.Add(1)
		}
		if err = ignoreGone(err); err != nil {
			return fmt.Errorf("grant a maxUnavailable slot to enactment %q: %w", e.Name, err)
		}
		return nil
	})
	return int(granted.Load()), err
}

// answer writes the controller's answer to each enactment's request, a
// copy of each, parallelWrites at a time, and returns the first error:
// set changes the slot (one is made for a new enactment, which asks by its
// request), write writes the copy.
func answer(enactments []*nncev1beta1.NodeNetworkConfigurationEnactment, set func(*nncev1beta1.ApplySlot),
	write func(*nncev1beta1.NodeNetworkConfigurationEnactment) error) error {
	var g errgroup.Group
	g.SetLimit(parallelWrites)
	for _, e := range enactments {
		g.Go(func() error {
			e := e.DeepCopy()
			if e.Status.Slot == nil {
				e.Status.Slot = &nncev1beta1.ApplySlot{}
			}
			set(e.Status.Slot)
			return write(e)
		})
	}
	return g.Wait()
}

// ignoreGone is err unless the enactment changed or went since the cache
// saw it: the next reconcile, which that change queues, answers again.
func ignoreGone(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// abort refuses the requests of a policy that failed on maxUnavailable
// nodes (status.slot.aborted); the handler shows Aborted /
// ConfigurationAborted and does not ask again for this generation. A
// request that changed since the cache saw it is left to the next
// reconcile.
func (r *Reconciler) abort(ctx context.Context, ro *rollout) error {
	why := nncev1beta1.SlotAborted{PolicyGeneration: ro.policy.Generation, Message: fmt.Sprintf(
		"Configuration aborted: policy generation %d failed on %s, which reaches its maxUnavailable (%d); "+
			"fix the policy to roll it out again", ro.policy.Generation, nodes(ro.slots.failed), ro.limit)}
	return answer(ro.slots.abort, func(slot *nncev1beta1.ApplySlot) {
		aborted := why // each write decodes its response into its own
		slot.Aborted, slot.Queued = &aborted, nil
	}, func(e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
		err := r.Client.Status().Update(ctx, e)
		if err == nil {
			// kubernetes-nmstate's words, on the policy, where admins look.
			r.Recorder.Eventf(ro.policy, e, corev1.EventTypeWarning, ippoolv1.ReasonReconcileFailed, "Abort",
				"reconciliation of enactment %q has aborted", e.Name)
		}
		if err = ignoreGone(err); err != nil {
			return fmt.Errorf("abort the rollout on enactment %q: %w", e.Name, err)
		}
		return nil
	})
}

// queue marks the requests that wait for a slot (status.slot.queued) once;
// their handlers show them Pending / MaxUnavailableLimitReached. A new
// enactment's request stays a request (enactmentrecord.Requesting). It
// marks the longest waiting, one round of writes (marksPerPass) a pass,
// and reports whether more are left for the next: the slots that free up
// while a pass writes are granted only by the next, and a hundred marks
// written in one pass held the second half of a rollout back by most of a
// second. A request granted before its turn to be marked is never marked.
func (r *Reconciler) queue(ctx context.Context, enactments []*nncev1beta1.NodeNetworkConfigurationEnactment, now time.Time) (bool, error) {
	first, later := toMark(enactments)
	return later, answer(first, func(slot *nncev1beta1.ApplySlot) {
		slot.Queued, slot.Aborted = microNow(now), nil
	}, func(e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
		if err := ignoreGone(r.Client.Status().Update(ctx, e)); err != nil {
			return fmt.Errorf("mark enactment %q as waiting for a maxUnavailable slot: %w", e.Name, err)
		}
		return nil
	})
}

// toMark returns the first marksPerPass of the waiting requests (in the
// order given: the longest waiting first) that are not marked queued yet,
// and whether more are left.
func toMark(waiting []*nncev1beta1.NodeNetworkConfigurationEnactment) ([]*nncev1beta1.NodeNetworkConfigurationEnactment, bool) {
	unmarked := slices.DeleteFunc(slices.Clone(waiting), func(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
		return e.Status.Slot != nil && e.Status.Slot.Queued != nil
	})
	return unmarked[:min(len(unmarked), marksPerPass)], len(unmarked) > marksPerPass
}

// ProgressEvery is the shortest interval between two writes of a policy's
// status that only report changed counts ("Policy is progressing n/m
// nodes finished", "n/n nodes successfully configured" as nodes come and
// go, the held slot count). Every write of a policy is an event at every
// node's handler: at a thousand nodes, reporting each step of a rollout or
// a scale-down would cost more than the change itself. A change of
// condition (the start or the end of a rollout, a failure) is written at
// once.
const ProgressEvery = 5 * time.Second

// writeStatus writes the policy's conditions and the count of held slots
// when they changed. A write that would only report changed counts within
// ProgressEvery of the last one is held back: it returns how long.
func (r *Reconciler) writeStatus(ctx context.Context, ro *rollout, now time.Time) (time.Duration, error) {
	p := ro.policy
	held := ro.slots.held
	if conditions.Same(ro.conditions, p.Status.Conditions) && p.Status.UnavailableNodeCount == held {
		return 0, nil
	}
	if wait := countsHeldBack(p, ro.conditions, now); wait > 0 {
		return wait, nil
	}
	p.Status.Conditions = ro.conditions
	if p.Status.UnavailableNodeCount != held {
		p.Status.UnavailableNodeCount = held
		p.Status.LastUnavailableNodeCountUpdate = &metav1.Time{Time: now.Truncate(time.Second)}
	}
	if err := r.Client.Status().Update(ctx, p); err != nil {
		return 0, fmt.Errorf("update the status of policy %q: %w", p.Name, err)
	}
	return 0, nil
}

// countsHeldBack returns how long a write of want must wait because it
// only changes counts (every condition keeps its status and reason) on a
// policy whose status last changed less than ProgressEvery before now; 0
// if it may be written now.
func countsHeldBack(p *nmstatev1.NodeNetworkConfigurationPolicy, want shared.ConditionList, now time.Time) time.Duration {
	if len(p.Status.Conditions) == 0 || len(want) != len(p.Status.Conditions) {
		return 0
	}
	var last time.Time
	for _, w := range want {
		before := p.Status.Conditions.Find(w.Type)
		if before == nil || before.Status != w.Status || before.Reason != w.Reason {
			return 0
		}
		if before.LastHeartbeatTime.After(last) {
			last = before.LastHeartbeatTime.Time
		}
	}
	if u := p.Status.LastUnavailableNodeCountUpdate; u != nil && u.After(last) {
		last = u.Time
	}
	return max(last.Add(ProgressEvery).Sub(now), 0)
}

// nodes says "1 node" or "n nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

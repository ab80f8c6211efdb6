package handler

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// NetworkState reads and applies the node's network state.
// *nmstatectl.Runner implements it.
type NetworkState interface {
	// Show returns the current state (JSON or YAML).
	Show(ctx context.Context) ([]byte, error)
	// Apply applies a desired state, or rolls back and fails.
	Apply(ctx context.Context, desired []byte) error
}

// Reconciler reconciles NodeNetworkConfigurationPolicies for one node. Every
// field is set by the caller; see New for defaults.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, for decisions a stale cache
	// could get wrong (enactments, pools, the policy's status).
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
	// PolicyStatusBackoff paces retries of policy status writes. Every
	// handler writes the same policy's status (its maxUnavailable slot count
	// and conditions), so conflicts are expected, and a lost slot release
	// would hold other nodes back for SlotTimeout: retry patiently.
	PolicyStatusBackoff wait.Backoff
	// Metrics counts allocation attempts and conflicts.
	Metrics *Metrics
	// PendingRequeue is how long to wait before looking again at an
	// enactment that is Pending (pool not available, maxUnavailable reached).
	PendingRequeue time.Duration
	// FailedRequeue is how long to wait before applying again after
	// nmstatectl failed; failures are often transient.
	FailedRequeue time.Duration
	// SlotTimeout is how long a node may hold a maxUnavailable slot before
	// other nodes consider it abandoned (a handler killed mid-apply).
	SlotTimeout time.Duration
	// NetworkLock, if set, is held while the handler checks that its
	// record is current and applies a state; the node's state reporter
	// reads under it (see nodestate.Reconciler.NetworkLock).
	NetworkLock sync.Locker
	// StateChanged, if set, is called after every apply, successful or
	// not (a rollback changes the network too): the node's state reporter
	// reads the state again.
	StateChanged func()

	// notes carries what an enactment's messages must tell until its state
	// is applied.
	notes notes
}

// notes holds, per enactment, a note for its condition messages (that an
// address was re-allocated) from the reconcile that made the change until
// the one that applies it, which may come later (maxUnavailable). It is
// memory only: after a restart, the Events still tell.
type notes struct {
	mu sync.Mutex
	m  map[string]string
}

// keep stores note for enactment if it is not empty, and returns the note
// the enactment has.
func (n *notes) keep(enactment, note string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if note != "" {
		if n.m == nil {
			n.m = map[string]string{}
		}
		n.m[enactment] = note
	}
	return n.m[enactment]
}

// done forgets the note of an enactment whose state is applied.
func (n *notes) done(enactment string) {
	n.mu.Lock()
	delete(n.m, enactment)
	n.mu.Unlock()
}

// Reconcile brings one policy to this node: it retires the enactment of a
// policy that is gone or does not select the node, and otherwise enacts it.
// Either way it then refreshes the policy's aggregated conditions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("node", r.NodeName, "policy", req.Name)
	ctx = ctrl.LoggerInto(ctx, log)

	policy, err := r.getPolicy(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	enactment, err := r.getEnactment(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if enactment != nil && !enactment.DeletionTimestamp.IsZero() {
		// Being deleted (by a retire that did not finish, by someone else,
		// or with its Node): give its addresses back, then start over.
		return ctrl.Result{RequeueAfter: time.Second}, r.retire(ctx, enactment, "the enactment is being deleted")
	}
	selected, why, err := r.selects(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !selected {
		if err := r.retire(ctx, enactment, why); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.updatePolicyStatus(ctx, policy)
	}
	result, err := r.enact(ctx, policy, enactment)
	if err != nil {
		return result, err
	}
	return result, r.updatePolicyStatus(ctx, policy)
}

// enact resolves the policy's captures, allocates, records, renders and
// applies, and leaves the enactment's conditions saying how it went.
func (r *Reconciler) enact(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment) (ctrl.Result, error) {
	enactment, err := r.ensureEnactment(ctx, policy, enactment)
	if err != nil {
		return ctrl.Result{}, err
	}
	captures, err := capture.Parse(policy.Spec.Capture)
	if err != nil {
		return r.conclude(ctx, policy, enactment, failing(ippoolv1.ReasonInvalidCapture, err.Error()))
	}
	alloc, blocked, err := r.allocate(ctx, policy, enactment, captures)
	if err != nil || blocked != nil {
		return r.concludeBlocked(ctx, policy, enactment, blocked, err)
	}
	r.reportMoved(enactment, alloc.moved)
	addresses := alloc.addresses
	dropped := unclaimed(enactment, addresses, captures)
	rendered, err := r.render(ctx, policy, captures, addresses)
	if err != nil {
		record(enactment, captures, addresses, addressStates(addresses), r.meta())
		return r.concludeRecorded(ctx, policy, enactment, alloc, dropped,
			failing(string(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure), err.Error()))
	}
	if upToDate(enactment, policy, rendered, captures, addresses) {
		return ctrl.Result{}, nil
	}
	// The record reaches the API server before the state reaches the node.
	record(enactment, captures, addresses, rendered.CapturedStates, r.meta())
	enactment.Status.DesiredState = shared.NewState(string(rendered.DesiredState))
	note := r.notes.keep(enactment.Name, movedNote(alloc.moved))
	if res, err := r.concludeRecorded(ctx, policy, enactment, alloc, dropped, progressing("Applying desired state"+note)); err != nil {
		return res, err
	}
	return r.applyWithinMaxUnavailable(ctx, policy, enactment, rendered.DesiredState, note)
}

// reportMoved raises a Warning Event on the enactment for every recorded
// address that was replaced because its pool no longer hands it out.
func (r *Reconciler) reportMoved(e *nncev1beta1.NodeNetworkConfigurationEnactment, moved []string) {
	for _, m := range moved {
		r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressOutsideRange, "Allocate",
			"%s; allocating a new address", m)
	}
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
// Failing outcome, or an error to retry.
func (r *Reconciler) concludeBlocked(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment, blocked *outcome, err error) (ctrl.Result, error) {
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.conclude(ctx, policy, enactment, *blocked)
}

// concludeRecorded writes an enactment that now records alloc's fresh
// addresses and no longer records dropped. The write is guarded by the
// resourceVersion the fresh addresses' in-flight entries carry as their
// token. Once it has landed, dropped is quarantined. If the API server
// refused it (a conflict), the record certainly does not exist: the fresh
// addresses are withdrawn, and if the pool controller fenced the enactment
// because the addresses stayed unrecorded too long, that is told. After
// any other error the write may have landed, so they are kept.
func (r *Reconciler) concludeRecorded(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment, alloc *allocation, dropped map[string][]string,
	o outcome) (ctrl.Result, error) {
	res, err := r.conclude(ctx, policy, enactment, o)
	switch {
	case apierrors.IsConflict(err):
		r.withdraw(ctx, alloc)
		r.reportRevoked(ctx, alloc)
	case err == nil:
		r.quarantineDropped(ctx, enactment, dropped)
	}
	return res, err
}

// reportRevoked tells, with an Event, that fresh addresses were revoked by
// the pool controller before this handler could record them.
func (r *Reconciler) reportRevoked(ctx context.Context, alloc *allocation) {
	if len(alloc.fresh) == 0 {
		return
	}
	e, err := r.getEnactment(ctx, strings.TrimPrefix(alloc.enactment, r.NodeName+"."))
	if err != nil || e == nil {
		return
	}
	fence := e.Annotations[ippoolv1.FenceAnnotation]
	for pool, ips := range alloc.fresh {
		for _, ip := range ips {
			if fence == pool+"/"+ip {
				ctrl.LoggerFrom(ctx).Info("an unrecorded address was revoked; not applying it", "pool", pool, "ip", ip)
				r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Record",
					"NodeIPPool %s revoked %s before node %s recorded it (the handler stalled past the grace period); not applied, allocating again",
					pool, ip, r.NodeName)
			}
		}
	}
}

// conclude writes the enactment's conditions for o and requeues as o asks.
func (r *Reconciler) conclude(ctx context.Context, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment, o outcome) (ctrl.Result, error) {
	enactment.Status.PolicyGeneration = policy.Generation
	enactment.Status.WaitingForIPPool = o.waitingFor
	if err := r.writeEnactment(ctx, enactment, o); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
}

func (r *Reconciler) meta() shared.NodeNetworkConfigurationEnactmentMetaInfo {
	return shared.NodeNetworkConfigurationEnactmentMetaInfo{Version: "0", TimeStamp: metav1.NewTime(r.Clock.Now().Truncate(time.Second))}
}

// getPolicy returns the policy, or nil when it does not exist.
func (r *Reconciler) getPolicy(ctx context.Context, name string) (*nmstatev1.NodeNetworkConfigurationPolicy, error) {
	var p nmstatev1.NodeNetworkConfigurationPolicy
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get policy %q: %w", name, err)
	}
	return &p, nil
}

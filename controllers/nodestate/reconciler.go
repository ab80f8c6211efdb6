package nodestate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
)

// StateReader reads the node's current network state (JSON or YAML).
// *nmstatectl.Runner implements it.
type StateReader interface {
	Show(ctx context.Context) ([]byte, error)
}

// Reconciler writes the NodeNetworkState of one node. Set every exported
// field; New sets them with defaults.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server: the NodeNetworkState again
	// when a write met a change of it.
	APIReader client.Reader
	// NodeName is the node whose state is published.
	NodeName string
	// State reads the node's network state.
	State StateReader
	// Clock stamps the updates.
	Clock clock.PassiveClock
	// NetworkLock, if set, is held by the handler while it checks its
	// record and applies a state. The reporter holds it from before
	// Settle until its write is done: a published state is never one from
	// the middle of an apply, and no apply of the handler changes the
	// network between the read and the write. The pool controller relies
	// on that to lift a quarantine on a state published after a release.
	NetworkLock sync.Locker
	// Settle, if set, is called under NetworkLock before the state is read
	// for a publication that must be made: the first after the reporter
	// starts, one the pool controller asked for (RefreshStateLabel). It
	// takes released addresses off the
	// interfaces (handler.Reconciler.Settle). While the node's Node is
	// gone it is called every orphanSettle with orphaned set, and nothing
	// is published. Its error is logged; the state is published all the
	// same.
	Settle func(ctx context.Context, orphaned bool) error
	// Refresh is how often the state is read when nothing asks for it; each
	// wait is jittered by ±10% (kubernetes-nmstate's), so that the nodes
	// of a cluster started together do not all write at once.
	Refresh time.Duration
	// Random returns numbers in [0, 1) for the jitter.
	Random func() float64
	// Version is the handler's nmstate version (nmstatectl --version),
	// published as status.handlerNmstateVersion; empty if unknown.
	Version string

	refreshes *Refreshes
	// mu guards what the reporter remembers of its publications.
	mu sync.Mutex
	// published is set once a state was published since the start, and
	// answered is the last RefreshStateLabel value a publication answered.
	published bool
	answered  string
	// once is set once a state read and parsed was published (Available),
	// and is read without mu (Published).
	once atomic.Bool
}

// Published reports whether the reporter has published the node's state
// since it started, read and parsed (Available), not a failure to read it
// (handler.Reconciler.StatePublished).
func (r *Reconciler) Published() bool { return r.once.Load() }

// jittered returns d moved by up to ±10%: f in [0, 1) picks where.
func jittered(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*f))
}

// refreshAfter is the wait before the next look at the state.
func (r *Reconciler) refreshAfter() time.Duration {
	return jittered(r.Refresh, r.Random())
}

// nnsConditionTypes are the NNS condition types, in kubernetes-nmstate's
// order.
var nnsConditionTypes = []shared.ConditionType{shared.NodeNetworkStateConditionAvailable, shared.NodeNetworkStateConditionFailing}

// Reconcile reads the node's state and writes its NNS if it changed, or if
// a publication must be made (see Settle).
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("node", r.NodeName))
	node, err := nodemeta.Get(ctx, r.Client, r.NodeName)
	if apierrors.IsNotFound(err) {
		// A deleted node has no state to publish, but a machine still
		// running takes off what the pools release with its Node, soon:
		// an address kept for the node's return is handed on once its
		// quarantine period has passed.
		r.settleOrphan(ctx)
		return ctrl.Result{RequeueAfter: orphanSettle}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	nns, err := r.ensure(ctx, node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if r.NetworkLock != nil {
		r.NetworkLock.Lock()
		defer r.NetworkLock.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	must := !r.published || nns.Labels[ippoolv1.RefreshStateLabel] != r.answered
	if must {
		r.settle(ctx, false)
	}
	readAt := r.Clock.Now()
	current, showErr := r.State.Show(ctx)
	read := reading{state: current, err: showErr, at: readAt, must: must}
	// A request for the state (a new label) changes the object under the
	// write: the write is made again on the latest copy, with what was
	// read under the lock.
	for attempt := 1; ; attempt++ {
		written, err := r.publish(ctx, nns, read)
		if err == nil {
			if written {
				r.published, r.answered = true, nns.Labels[ippoolv1.RefreshStateLabel]
				if c := nns.Status.Conditions.Find(shared.NodeNetworkStateConditionAvailable); c != nil && c.Status == corev1.ConditionTrue {
					r.once.Store(true)
				}
			}
			return ctrl.Result{RequeueAfter: r.refreshAfter()}, nil
		}
		if !apierrors.IsConflict(err) || attempt == 3 {
			return ctrl.Result{}, err
		}
		if nns, err = r.latest(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
}

// reading is one read of the node's network state.
type reading struct {
	state []byte
	err   error
	at    time.Time
	// must: publish it even if nothing changed.
	must bool
}

// publish writes the NNS status that read makes of nns's, if it changed
// or must be published, and reports whether it wrote.
func (r *Reconciler) publish(ctx context.Context, nns *nncev1beta1.NodeNetworkState, read reading) (bool, error) {
	status, changed := next(nns.Status, read.state, read.err, read.at)
	if status.HandlerNmstateVersion != r.Version {
		status.HandlerNmstateVersion, changed = r.Version, true
	}
	if read.must && read.err == nil {
		// A state read now, published even if it did not change: the
		// answer to whoever asked for it.
		status.LastSuccessfulUpdateTime, changed = later(nns.Status.LastSuccessfulUpdateTime, read.at), true
	}
	if !changed {
		return false, nil
	}
	nns.Status = status
	if err := r.Client.Status().Update(ctx, nns); err != nil {
		return false, fmt.Errorf("write NodeNetworkState %q: %w", nns.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("published the node's network state", "failing", read.err != nil,
		"asked", nns.Labels[ippoolv1.RefreshStateLabel] != "")
	return true, nil
}

// latest reads the node's NNS from the API server.
func (r *Reconciler) latest(ctx context.Context) (*nncev1beta1.NodeNetworkState, error) {
	var nns nncev1beta1.NodeNetworkState
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: r.NodeName}, &nns); err != nil {
		return nil, fmt.Errorf("get NodeNetworkState %q: %w", r.NodeName, err)
	}
	return &nns, nil
}

// settle runs Settle, if set, and logs its error: the state is published
// all the same. The caller holds NetworkLock.
func (r *Reconciler) settle(ctx context.Context, orphaned bool) {
	if r.Settle == nil {
		return
	}
	if err := r.Settle(ctx, orphaned); err != nil {
		ctrl.LoggerFrom(ctx).Info("could not settle the network before publishing it", "error", err.Error())
	}
}

// orphanSettle is how often the machine of a deleted Node settles its
// network while its handler runs.
const orphanSettle = 2 * time.Second

// settleOrphan settles the network of a node whose Node is gone, and
// publishes nothing.
func (r *Reconciler) settleOrphan(ctx context.Context) {
	if r.NetworkLock != nil {
		r.NetworkLock.Lock()
		defer r.NetworkLock.Unlock()
	}
	r.settle(ctx, true)
}

// later returns a publication time for a state read at now that is later
// than prev: now, to the second, or a second after prev. Each publication
// is stamped later than the one before, on the node's clock: a state
// stamped later than one seen at a release was published after it.
func later(prev metav1.Time, now time.Time) metav1.Time {
	t := now.Truncate(time.Second)
	if !t.After(prev.Time) {
		t = prev.Add(time.Second)
	}
	return metav1.NewTime(t)
}

// ensure returns the node's NNS, creating it, owned by the node, if it is
// missing.
func (r *Reconciler) ensure(ctx context.Context, node *metav1.PartialObjectMetadata) (*nncev1beta1.NodeNetworkState, error) {
	var nns nncev1beta1.NodeNetworkState
	err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, &nns)
	if err == nil {
		return &nns, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get NodeNetworkState %q: %w", r.NodeName, err)
	}
	nns = nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}}}
	if err := r.Client.Create(ctx, &nns); err != nil {
		return nil, fmt.Errorf("create NodeNetworkState %q: %w", r.NodeName, err)
	}
	return &nns, nil
}

// next computes the NNS status from the state just read, and whether it
// differs from old. A state that did not change, read without error,
// changes nothing: no heartbeat.
func next(old shared.NodeNetworkStateStatus, current []byte, showErr error, now time.Time) (shared.NodeNetworkStateStatus, bool) {
	s := *old.DeepCopy()
	if showErr != nil {
		s.Conditions = conditions.OneTrue(old.Conditions, nnsConditionTypes, shared.NodeNetworkStateConditionFailing,
			shared.NodeNetworkStateConditionFailedToConfigure, fmt.Sprintf("reading the node's network state failed: %v", showErr), now)
		return s, !conditions.Same(s.Conditions, old.Conditions)
	}
	state, err := canonical(current)
	if err != nil {
		s.Conditions = conditions.OneTrue(old.Conditions, nnsConditionTypes, shared.NodeNetworkStateConditionFailing,
			shared.NodeNetworkStateConditionFailedToConfigure, fmt.Sprintf("nmstatectl show printed no state: %v", err), now)
		return s, !conditions.Same(s.Conditions, old.Conditions)
	}
	s.Conditions = conditions.OneTrue(old.Conditions, nnsConditionTypes, shared.NodeNetworkStateConditionAvailable,
		shared.NodeNetworkStateConditionSuccessfullyConfigured, "successfully read the node's network state", now)
	if was, err := canonical(old.CurrentState.Raw); err == nil && bytes.Equal(state, was) && conditions.Same(s.Conditions, old.Conditions) {
		return old, false
	}
	s.CurrentState = shared.NewState(string(state))
	s.LastSuccessfulUpdateTime = later(old.LastSuccessfulUpdateTime, now)
	return s, true
}

// canonical turns a state printed as JSON or YAML into compact JSON, so
// that equal states compare equal whatever their formatting.
func canonical(state []byte) ([]byte, error) {
	j, err := yaml.YAMLToJSON(state)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(j, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

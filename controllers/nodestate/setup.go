package nodestate

import (
	"context"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
)

// DefaultRefresh is how often the state is read when nothing asks for it.
const DefaultRefresh = time.Minute

// FieldOwner is the field manager of every write of the node's handler, which publishes its NodeNetworkState: the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-handler"

// New returns a Reconciler for node wired to the manager.
func New(mgr ctrl.Manager, node string, state StateReader) *Reconciler {
	return &Reconciler{Client: client.WithFieldOwner(mgr.GetClient(), FieldOwner), APIReader: mgr.GetAPIReader(), NodeName: node, State: state, Clock: clock.RealClock{}, Refresh: DefaultRefresh,
		Random: rand.Float64}
}

// Refreshes make the reporter read the state at once. Refresh never
// blocks; the ones that come while one waits are merged.
type Refreshes struct {
	events chan event.GenericEvent
}

// NewRefreshes returns the refreshes of one reporter.
func NewRefreshes() *Refreshes { return &Refreshes{events: make(chan event.GenericEvent, 1)} }

// Refresh asks for a look at the state of node: its network may have
// changed (after an apply).
func (n *Refreshes) Refresh(node string) {
	o := &nncev1beta1.NodeNetworkState{}
	o.Name = node
	select {
	case n.events <- event.GenericEvent{Object: o}:
	default:
	}
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several reporters in one process (tests).
	SkipNameValidation bool
}

// SetupWithManager registers the reporter: the node, its NNS (so a
// deleted NNS comes back) and refreshes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, refreshes *Refreshes, opts SetupOptions) error {
	r.refreshes = refreshes
	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.NodeName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("nns-reporter").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues()}).
		WatchesMetadata(&corev1.Node{}, toNode, builder.WithPredicates(thisNode)).
		Watches(&nncev1beta1.NodeNetworkState{}, toNode, builder.WithPredicates(thisNode)).
		WatchesRawSource(source.Channel(refreshes.events, toNode)).
		Complete(r)
}

// The reporter's permissions (generated into deploy/rbac/handler).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkstates,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkstates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

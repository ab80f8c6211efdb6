package handler

import (
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolwrite"
)

// Defaults used by New.
const (
	DefaultPendingRequeue = 10 * time.Second
	DefaultFailedRequeue  = time.Minute
	DefaultSlotTimeout    = 5 * time.Minute
)

// New returns a Reconciler for node wired to the manager, with the default
// clock, backoff and timeouts; callers may change any field before
// SetupWithManager.
func New(mgr ctrl.Manager, node string, state NetworkState, metrics *Metrics) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		NodeName:  node,
		State:     state,
		Recorder:  mgr.GetEventRecorder("nmstate-ippool-handler"),
		Clock:     clk,
		Pools:     writer(mgr, clk, metrics),
		// No Cap: reaching a Cap ends a wait.Backoff. 40 jittered steps from
		// 20ms growing by 15% retry for about half a minute.
		PolicyStatusBackoff: wait.Backoff{Duration: 20 * time.Millisecond, Factor: 1.15, Jitter: 1, Steps: 40},
		Metrics:             metrics,
		PendingRequeue:      DefaultPendingRequeue,
		FailedRequeue:       DefaultFailedRequeue,
		SlotTimeout:         DefaultSlotTimeout,
	}
}

// writer returns the pool writer of a handler, counting conflicts.
func writer(mgr ctrl.Manager, clk clock.Clock, metrics *Metrics) *poolwrite.Writer {
	w := poolwrite.NewWriter(mgr.GetAPIReader(), mgr.GetClient(), clk)
	w.OnConflict = metrics.conflict
	return w
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several handlers in one process (tests that
	// simulate many nodes); controller names are otherwise process-unique.
	SkipNameValidation bool
}

// SetupWithManager registers the controller. It watches policies, the
// enactments of every node (for the policies' aggregated conditions), this
// node's labels, and the pools the policies draw from.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nncp-handler").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation)}).
		For(&nmstatev1.NodeNetworkConfigurationPolicy{}).
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, handler.EnqueueRequestsFromMapFunc(policyOfEnactment)).
		WatchesMetadata(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies),
			builder.WithPredicates(r.thisNodesLabels())).
		Watches(&ippoolv1.NodeIPPool{}, handler.EnqueueRequestsFromMapFunc(r.policiesUsingPool),
			builder.WithPredicates(poolChangesThatUnblock())).
		Complete(r)
}

// The handler's permissions (generated into deploy/rbac/handler).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

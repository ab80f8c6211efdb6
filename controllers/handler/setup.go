package handler

import (
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crhandler "sigs.k8s.io/controller-runtime/pkg/handler"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
)

// Defaults used by New.
const (
	DefaultPendingRequeue = 10 * time.Second
	DefaultFailedRequeue  = time.Minute
	// DefaultUnservedWarning is how long an enactment waits for the pool
	// controller before its handler raises a NotServed Warning.
	DefaultUnservedWarning = 2 * time.Minute
)

// DefaultRetry is kubernetes-nmstate's: a failed generation is retried 5
// times, 1s after the first failure, then 2s, 4s, ... up to 30s.
var DefaultRetry = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: 5}

// Probes returns the probes of a handler: api-server and node-readiness,
// read through reader (which must not be a cache), and ping and dns on the
// state show reads, with kubernetes-nmstate's timings.
func Probes(reader client.Reader, node string, show probe.Show) probe.Set {
	return probe.Set{Probes: []probe.Probe{
		probe.Ping(show, probe.ICMPPing),
		probe.DNS(show, probe.DefaultDNSHost, "53"),
		probe.APIServer(reader),
		probe.NodeReadiness(reader, node),
	}}
}

// FieldOwner is the field manager of every write of the node's handler: the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-handler"

// New returns a Reconciler for node wired to the manager, with the default
// clock and timeouts; callers may change any field before
// SetupWithManager. The manager's cache must be built with CacheOptions.
func New(mgr ctrl.Manager, node string, state NetworkState, metrics *Metrics) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		Client:          client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		APIReader:       mgr.GetAPIReader(),
		NodeName:        node,
		State:           state,
		Recorder:        eventnote.New(mgr.GetEventRecorder("nmstate-ippool-handler")),
		Clock:           clk,
		Pools:           writer(mgr, clk, metrics),
		Metrics:         metrics,
		PendingRequeue:  DefaultPendingRequeue,
		FailedRequeue:   DefaultFailedRequeue,
		UnservedWarning: DefaultUnservedWarning,
		Retry:           DefaultRetry,
		Probes:          Probes(mgr.GetAPIReader(), node, state.Show),
	}
}

// CacheOptions restricts a handler's cache to what one node needs, so that
// its memory and watch events do not grow with the cluster: every policy
// (there are few), its own Node and NodeNetworkState, and its own
// enactments. Nothing else may be read through the cache: a Get or List of
// another kind would start a cluster-wide informer.
func CacheOptions(node string) cache.Options {
	byName := fields.OneTermEqualSelector("metadata.name", node)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		nodemeta.Object(""):             {Field: byName},
		&nncev1beta1.NodeNetworkState{}: {Field: byName},
		&nncev1beta1.NodeNetworkConfigurationEnactment{}: {
			Label: labels.SelectorFromSet(labels.Set{shared.EnactmentNodeLabel: node}),
		},
	}}
}

// writer returns the pool writer of a handler, counting conflicts.
func writer(mgr ctrl.Manager, clk clock.Clock, metrics *Metrics) *poolwrite.Writer {
	w := poolwrite.ForManager(mgr, clk, "nmstate-ippool-handler")
	metrics.count(w)
	return w
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several handlers in one process (tests that
	// simulate many nodes); controller names are otherwise process-unique.
	SkipNameValidation bool
}

// SetupWithManager registers the controller. It watches the policies'
// specs, this node's labels and this node's enactments; it reads pools on
// demand, and learns that a pool it waits on can serve again from the pool
// controller's nudge on its enactment.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nncp-handler").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues()}).
		For(&nmstatev1.NodeNetworkConfigurationPolicy{}, builder.WithPredicates(specOrIncarnationChanged())).
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, crhandler.EnqueueRequestsFromMapFunc(policyOfEnactment),
			builder.WithPredicates(changesByOthers())).
		WatchesMetadata(&corev1.Node{}, crhandler.EnqueueRequestsFromMapFunc(r.allPolicies),
			builder.WithPredicates(r.thisNodesLabels())).
		Complete(r)
}

// The handler's permissions (generated into deploy/rbac/handler). Its
// writes of enactments and NodeNetworkStates are narrowed to its own
// node's by deploy/admission; it reads pools and never writes them, but
// with --self-allocate, whose RBAC is deploy/self-allocate's.
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

package claim

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
)

// The provider's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkstates,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// FieldOwner is the field manager of every write of the claim controller: the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-claim-controller"

// New returns a Reconciler wired to the manager for the IPAM version
// served (capi.Served) and the Cluster version, "" without that CRD.
func New(mgr ctrl.Manager, version, clusterVersion string) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		Client:         client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		APIReader:      mgr.GetAPIReader(),
		Pools:          poolwrite.ForManager(mgr, clk, "nmstate-ippool-pool-controller"),
		Recorder:       eventnote.New(mgr.GetEventRecorder("nmstate-ippool-pool-controller")),
		Clock:          clk,
		Version:        version,
		ClusterVersion: clusterVersion,
	}
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
}

// concurrentClaims is how many claims are looked at at once. When many
// claims of a pool ask together, their asks overlap, and the pool writer
// serves them in shared pool writes (poolwrite.Writer.Together); with one
// worker, every claim paid a pool write of its own, and the pool
// controller's pass after it. The workqueue hands a claim to one reconcile
// at a time.
const concurrentClaims = 8

// SetupWithManager registers the controller: the claims of NodeIPPools,
// their IPAddresses, the pools (a pool that can serve again serves the
// claims waiting for it), the namespaces (one a pool's
// claimNamespaceSelector may select now) and, when installed, the Clusters (one unpaused).
// The manager's client must cache unstructured objects: the waiting
// claims are found through an index of that cache.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), capi.NewClaim(r.Version), waitingIndex, waitsFor); err != nil {
		return err
	}
	var err error
	if r.Carried, err = carriers.Ensure(r.Carried, mgr, r.APIReader); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("ipaddressclaim").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues(),
			MaxConcurrentReconciles: concurrentClaims}).
		For(capi.NewClaim(r.Version), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			u, ok := o.(*unstructured.Unstructured)
			return ok && capi.PoolRefOf(u).Ours()
		}))).
		Owns(capi.NewAddress(r.Version)).
		Watches(&ippoolv1.NodeIPPool{}, handler.EnqueueRequestsFromMapFunc(r.waitingFor)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.waitingIn),
			builder.WithPredicates(predicate.LabelChangedPredicate{}))
	if r.ClusterVersion != "" {
		b = b.Watches(capi.NewCluster(r.ClusterVersion), handler.EnqueueRequestsFromMapFunc(r.ofCluster))
	}
	return b.Complete(r)
}

// waitingIndex indexes the claims that are not Ready by the NodeIPPool
// they name (waitsFor): every write of a pool looks its waiting claims up,
// and the index keeps that from reading every claim each time.
const waitingIndex = "nmstate-ippool.waitingFor"

// waitsFor returns the NodeIPPool a claim that is not Ready names, none
// for another provider's claim or a Ready one.
func waitsFor(o client.Object) []string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if ref := capi.PoolRefOf(u); ref.Ours() && !isReady(u) {
		return []string{ref.Name}
	}
	return nil
}

// waitingFor maps a pool to its claims that are not Ready.
func (r *Reconciler) waitingFor(ctx context.Context, o client.Object) []reconcile.Request {
	return r.claimsWhere(ctx, nil, client.MatchingFields{waitingIndex: o.GetName()})
}

// waitingIn maps a namespace whose labels changed to its claims of
// NodeIPPools that are not Ready: a pool's claimNamespaceSelector may
// select it now.
func (r *Reconciler) waitingIn(ctx context.Context, o client.Object) []reconcile.Request {
	return r.claimsWhere(ctx, func(u *unstructured.Unstructured) bool {
		return capi.PoolRefOf(u).Ours() && !isReady(u)
	}, client.InNamespace(o.GetName()))
}

// ofCluster maps a Cluster to the claims of NodeIPPools that belong to it.
func (r *Reconciler) ofCluster(ctx context.Context, o client.Object) []reconcile.Request {
	return r.claimsWhere(ctx, func(u *unstructured.Unstructured) bool {
		return capi.PoolRefOf(u).Ours() && capi.ClusterOf(u) == o.GetName()
	}, client.InNamespace(o.GetNamespace()))
}

// claimsWhere returns the claims the cache lists with opts that match
// (every one for a nil match). match only reads: the cache's claims are
// not copied.
func (r *Reconciler) claimsWhere(ctx context.Context, match func(*unstructured.Unstructured) bool, opts ...client.ListOption) []reconcile.Request {
	list := capi.NewClaimList(r.Version)
	if err := r.Client.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "could not list IPAddressClaims")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if u := &list.Items[i]; match == nil || match(u) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}})
		}
	}
	return reqs
}

// isReady reports whether the claim's Ready condition is True.
func isReady(u *unstructured.Unstructured) bool {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, item := range list {
		if m, ok := item.(map[string]any); ok && m["type"] == capi.ConditionReady {
			return m["status"] == "True"
		}
	}
	return false
}

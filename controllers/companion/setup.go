package companion

import (
	"context"
	"slices"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// The controller's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=nmstate.io,resources=poolednodenetworkconfigurationpolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=poolednodenetworkconfigurationpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=poolednodenetworkconfigurationpolicies/finalizers,verbs=update
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkstates,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// FieldOwner is the field manager of every write of the companion controller: the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-companion-controller"

// New returns a Reconciler wired to the manager.
func New(mgr ctrl.Manager) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		Client:    client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		APIReader: mgr.GetAPIReader(),
		Pools:     poolwrite.ForManager(mgr, clk, "nmstate-ippool-pool-controller"),
		Recorder:  eventnote.New(mgr.GetEventRecorder("nmstate-ippool-pool-controller")),
		Clock:     clk,
		// kubernetes-nmstate's handler retries an apply for about a
		// minute before it fails (5 attempts, backoff up to 30 s).
		RemovalRetry:   time.Minute,
		StatelessGrace: statelessGrace,
	}
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
}

// SetupWithManager registers the controller: pooled policies, the NNCPs
// they generate, the enactments kubernetes-nmstate's handler writes for
// those, the Nodes (one that joins, leaves, is relabelled or deleted;
// every policy for one that joins or changes its hostname label), and the
// pools (one that can serve again serves the nodes waiting for it). And
// beside it the controller that lets deleted Nodes go (nodeReconciler).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	var err error
	if r.Carried, err = carriers.Ensure(r.Carried, mgr, r.APIReader); err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("poolednodenetworkconfigurationpolicy").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues()}).
		For(&ippoolv1.PooledNodeNetworkConfigurationPolicy{}).
		// Its own writes and resets, not kubernetes-nmstate's status
		// writes: every handler writes every policy's status.
		Owns(&nmstatev1.NodeNetworkConfigurationPolicy{}, builder.OnlyMetadata, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}), r.forgetDeleted())).
		// Where a node stands: not every status write of its enactment.
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, handler.EnqueueRequestsFromMapFunc(r.ofEnactment),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: stateChanged})).
		// A Node that joins, leaves, is relabelled or deleted, tainted out
		// of service or not Ready any more; not its heartbeats.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.ofNode), builder.WithPredicates(predicate.Or(
			predicate.LabelChangedPredicate{}, predicate.Funcs{UpdateFunc: departureChanged}))).
		// A Node whose kubernetes.io/hostname may now be another's: every
		// generated policy selects its node by that label.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.every), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return true }, UpdateFunc: hostnameChanged,
			DeleteFunc: func(event.DeleteEvent) bool { return false }, GenericFunc: func(event.GenericEvent) bool { return false }})).
		Watches(&ippoolv1.NodeIPPool{}, handler.EnqueueRequestsFromMapFunc(r.ofPool), builder.WithPredicates(predicate.Funcs{UpdateFunc: servesMore})).
		Complete(r)
	if err != nil {
		return err
	}
	nodes := &nodeReconciler{client: client.WithFieldOwner(mgr.GetClient(), FieldOwner), reader: mgr.GetAPIReader(), recorder: r.Recorder}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pooledpolicynode").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues()}).
		// Deleted Nodes that carry the finalizer, and nothing else.
		For(&corev1.Node{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return !o.GetDeletionTimestamp().IsZero() && controllerutil.ContainsFinalizer(o, ippoolv1.FinalizerPooledNode)
		}))).
		// A record that goes may let a deleted Node go.
		Watches(&ippoolv1.PooledNodeNetworkConfigurationPolicy{}, handler.EnqueueRequestsFromMapFunc(nodes.recordedNodes)).
		Complete(nodes)
}

// stateChanged reports whether an enactment's update moves its node: a
// new generation or another True condition.
func stateChanged(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	cur, okNew := e.ObjectNew.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	if !okOld || !okNew {
		return true
	}
	return old.Status.PolicyGeneration != cur.Status.PolicyGeneration ||
		conditions.TrueType(old.Status.Conditions) != conditions.TrueType(cur.Status.Conditions)
}

// servesMore reports whether a pool's update may serve nodes that wait
// for it: its range changed, it became available, or addresses were
// freed; not every allocation.
func servesMore(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*ippoolv1.NodeIPPool)
	cur, okNew := e.ObjectNew.(*ippoolv1.NodeIPPool)
	if !okOld || !okNew {
		return true
	}
	available := func(p *ippoolv1.NodeIPPool) string {
		if c := meta.FindStatusCondition(p.Status.Conditions, ippoolv1.ConditionAvailable); c != nil {
			return string(c.Status) + c.Reason
		}
		return ""
	}
	return old.Generation != cur.Generation || available(old) != available(cur) || cur.Status.Free > old.Status.Free
}

// ofEnactment maps an enactment of a generated NNCP to its pooled policy,
// and one under the name of a policy not generated yet to the pooled
// policies whose records name that policy.
func (r *Reconciler) ofEnactment(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[shared.EnactmentPolicyLabel]
	if name != "" {
		nncp := policymeta.Object(name)
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, nncp)
		if owner := nncp.Labels[ippoolv1.PooledPolicyLabel]; err == nil && owner != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: owner}}}
		}
	}
	// Not of a generated policy that exists: an enactment under the name
	// of one not generated yet may be what keeps it from being created
	// (earlierBlocks; another node's enactment carries the name with its
	// own labels), and its change may let it be.
	return r.policiesWhere(ctx, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) bool {
		return slices.ContainsFunc(p.Status.Nodes, func(n ippoolv1.PooledPolicyNode) bool {
			return n.Policy == name || shared.EnactmentKey(n.Node, n.Policy).Name == o.GetName()
		})
	})
}

// ofNode maps a Node to the pooled policies that select it or hold a
// record of it.
func (r *Reconciler) ofNode(ctx context.Context, o client.Object) []reconcile.Request {
	return r.policiesWhere(ctx, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) bool {
		return p.Status.NodeOf(o.GetName()) != nil ||
			labels.SelectorFromSet(p.Spec.NodeSelector).Matches(labels.Set(o.GetLabels()))
	})
}

// every maps an object to every pooled policy.
func (r *Reconciler) every(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.policiesWhere(ctx, func(*ippoolv1.PooledNodeNetworkConfigurationPolicy) bool { return true })
}

// hostnameChanged reports whether a Node's kubernetes.io/hostname label
// changed.
func hostnameChanged(e event.UpdateEvent) bool {
	return e.ObjectOld.GetLabels()[hostnameLabel] != e.ObjectNew.GetLabels()[hostnameLabel]
}

// ofPool maps a pool to the pooled policies that draw from it.
func (r *Reconciler) ofPool(ctx context.Context, o client.Object) []reconcile.Request {
	return r.policiesWhere(ctx, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) bool {
		c, err := capture.Parse(p.Spec.Capture)
		return err == nil && slices.Contains(c.Pools(), o.GetName())
	})
}

func (r *Reconciler) policiesWhere(ctx context.Context, match func(*ippoolv1.PooledNodeNetworkConfigurationPolicy) bool) []reconcile.Request {
	var list ippoolv1.PooledNodeNetworkConfigurationPolicyList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "could not list pooled policies")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if match(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return reqs
}

package pool

import (
	"bytes"
	"context"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/periods"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/batch"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// FieldOwner is the field manager of every write of the pool controller: the
// managedFields of what it writes name it, so that an admin (and
// docs/protocol.md's test of "Who writes what") sees who wrote each part.
const FieldOwner = "nmstate-ippool-pool-controller"

// New returns a Reconciler wired to the manager, with the default clock,
// backoff and grace period; callers may change any field before
// SetupWithManager.
func New(mgr ctrl.Manager, metrics *Metrics) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		Client:           client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		APIReader:        mgr.GetAPIReader(),
		Pools:            poolwrite.ForManager(mgr, clk, "nmstate-ippool-pool-controller"),
		Recorder:         eventnote.New(mgr.GetEventRecorder("nmstate-ippool-pool-controller")),
		Clock:            clk,
		GracePeriod:      periods.DefaultGrace,
		QuarantinePeriod: periods.DefaultQuarantine,
		DepartureHold:    periods.DefaultDepartureHold,
		Metrics:          metrics,
		Batch:            batch.DefaultDelay,
		ServeEnactments:  true,
	}
}

// SetupOptions tune the controller.
type SetupOptions struct {
	// SkipNameValidation allows several controllers in one process (tests);
	// controller names are otherwise process-unique.
	SkipNameValidation bool
}

// concurrentPools is how many pools are looked at at once. The workqueue
// hands a pool to one reconcile at a time (poolMemory relies on it); pools
// need not wait for each other. With one worker, a pool whose writes
// conflict with busy handlers (a rebuild retrying its guarded write) held
// every other pool's rebuild, serve and garbage collection for as long.
const concurrentPools = 4

// SetupWithManager indexes enactments by pool and registers the
// controller: pools, the enactments that concern them, the creation or
// deletion of any pool (which may start or end an overlap), and reset
// annotations on policies.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts SetupOptions) error {
	if r.ServeEnactments {
		var err error
		if r.Carried, err = carriers.Ensure(r.Carried, mgr, r.APIReader); err != nil {
			return err
		}
	}
	if r.Carried != nil {
		// What a deleted Node's state shows is held as its records'
		// addresses are: for the departure hold, capped as they are.
		r.Carried.Hold = min(r.DepartureHold, r.QuarantinePeriod)
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.IPAMVersion != "" {
		// A claim's record coming or going changes what its pool holds.
		b = b.Watches(capi.NewAddress(r.IPAMVersion), batch.EnqueueAfter(r.Batch, r.poolsOfAddress))
	}
	if r.PooledPolicies {
		// A node's record coming or going changes what its pool holds.
		b = b.Watches(&ippoolv1.PooledNodeNetworkConfigurationPolicy{}, batch.EnqueueAfter(r.Batch, r.poolsOfPooledPolicy))
	}
	if states := r.Carried.StateInformer(); states != nil {
		// A node that comes to carry a reserved address, or stops,
		// changes ReservationsHonored: heard of from the watch Carried
		// reads, when what a state carries changes.
		b = b.WatchesRawSource(&source.Informer{Informer: states, Handler: batch.EnqueueAfter(r.Batch, r.poolsReservedTo),
			Predicates: []predicate.Predicate{carriedChanged}})
	}
	if r.HoldCarried {
		if err := r.setupStrayHolder(mgr, opts); err != nil {
			return err
		}
	}
	return b.
		Named("nodeippool").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(opts.SkipNameValidation), RateLimiter: backoff.Requeues(),
			MaxConcurrentReconciles: concurrentPools}).
		Watches(&ippoolv1.NodeIPPool{}, batch.EnqueueAfter(r.Batch, batch.Self)).
		Watches(&ippoolv1.NodeIPPool{}, handler.EnqueueRequestsFromMapFunc(r.allPools),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&nncev1beta1.NodeNetworkConfigurationEnactment{}, batch.EnqueueAfterLeaving(r.Batch, r.poolsConcerning, noLongerWaiting)).
		// Their reset annotations: metadata only, not every status write
		// of kubernetes-nmstate's handlers (companion mode).
		WatchesMetadata(policymeta.Object(""), handler.EnqueueRequestsFromMapFunc(requestsFor(resetPool))).
		WatchesMetadata(&nncev1beta1.NodeNetworkState{}, batch.EnqueueAfter(r.Batch, r.poolsAwaitingState)).
		Complete(r)
}

// poolsAwaitingState maps a node's NodeNetworkState, as metadata only, to
// the pools that quarantine an address of that node: its new state may be
// the evidence they wait for, so they look at their quarantines at once;
// and to the pools where a node waits for an address that only other
// nodes' networks carry: the state may show one taken off, or be gone
// with its Node.
func (r *Reconciler) poolsAwaitingState(ctx context.Context, o client.Object) []reconcile.Request {
	var pools ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range pools.Items {
		p := &pools.Items[i]
		m := r.remember(p)
		if slices.ContainsFunc(p.Status.Quarantined, func(q ippoolv1.QuarantinedAddress) bool { return q.Node == o.GetName() }) {
			m.maintenance.stateChanged.Store(true)
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		} else if m.serving.waitsOnCarried.Load() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
	}
	return reqs
}

// carriedChanged passes the changes of what a state, reduced to what it
// carries (Carried.StateInformer), carries: not every publication.
var carriedChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*nncev1beta1.NodeNetworkState)
	updated, ok2 := e.ObjectNew.(*nncev1beta1.NodeNetworkState)
	return !ok1 || !ok2 || !bytes.Equal(old.Status.CurrentState.Raw, updated.Status.CurrentState.Raw)
}}

// poolsReservedTo maps a node's NodeNetworkState, reduced to what it
// carries (Carried.StateInformer), to the pools that reserve an address
// it carries, or that found it carrying one reserved for another at their
// last maintenance pass: their ReservationsHonored condition may change.
func (r *Reconciler) poolsReservedTo(ctx context.Context, o client.Object) []reconcile.Request {
	var carried map[netip.Addr]string
	if nns, ok := o.(*nncev1beta1.NodeNetworkState); ok {
		carried = netstate.Carriers(nns.Status.CurrentState.Raw)
	}
	var pools ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil
	}
	var reqs []reconcile.Request
	for i := range pools.Items {
		p := &pools.Items[i]
		if len(p.Spec.Reservations) == 0 {
			continue
		}
		was := r.remember(p).maintenance.reservedCarriers.Load()
		if (was != nil && (*was)[o.GetName()]) || slices.ContainsFunc(p.Spec.Reservations, func(res ippoolv1.Reservation) bool {
			ip, err := netip.ParseAddr(res.IP)
			_, carries := carried[ip]
			return err == nil && carries
		}) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
	}
	return reqs
}

func (r *Reconciler) allPools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools ippoolv1.NodeIPPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pools.Items))
	for _, p := range pools.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return reqs
}

// poolsConcerning maps an enactment to the pools it concerns: those it
// names (poolsOfEnactment) and those whose range holds an address it
// records under another pool's name.
func (r *Reconciler) poolsConcerning(ctx context.Context, o client.Object) []reconcile.Request {
	names := poolsOfEnactment(o)
	e, ok := o.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	var pools ippoolv1.NodeIPPoolList
	if ok && len(e.Status.IPPool) > 0 && r.Client.List(ctx, &pools) == nil {
		for i := range pools.Items {
			rng, err := poolstatus.Range(&pools.Items[i])
			if err == nil && holdsAny(rng, e.Status.IPPool.Held()) {
				names = append(names, pools.Items[i].Name)
			}
		}
	}
	slices.Sort(names)
	return requestsFor(func(client.Object) []string { return slices.Compact(names) })(ctx, o)
}

// noLongerWaiting maps an enactment's update to the pool it waited on
// before and no longer does: that pool says who waits on it (its
// ExhaustedIPPool condition and the waiting holders' metric).
func noLongerWaiting(_ context.Context, old, updated client.Object) []reconcile.Request {
	o, ok1 := old.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	n, ok2 := updated.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	if !ok1 || !ok2 || exhaustedPool(o) == "" || exhaustedPool(o) == exhaustedPool(n) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: exhaustedPool(o)}}}
}

// poolsOfAddress maps a Cluster API IPAddress to the pools it concerns:
// the one it names and those whose range holds its address.
func (r *Reconciler) poolsOfAddress(ctx context.Context, o client.Object) []reconcile.Request {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	a := capi.AddressOf(u)
	if !a.Pool.Ours() {
		return nil
	}
	names := []string{a.Pool.Name}
	var pools ippoolv1.NodeIPPoolList
	if a.IP.IsValid() && r.Client.List(ctx, &pools) == nil {
		for i := range pools.Items {
			if rng, err := poolstatus.Range(&pools.Items[i]); err == nil && holdsAny(rng, []string{a.IP.String()}) {
				names = append(names, pools.Items[i].Name)
			}
		}
	}
	slices.Sort(names)
	return requestsFor(func(client.Object) []string { return slices.Compact(names) })(ctx, o)
}

// poolsOfPooledPolicy maps a pooled policy to the pools its records and
// its captures name, and those whose range holds an address it records.
func (r *Reconciler) poolsOfPooledPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*ippoolv1.PooledNodeNetworkConfigurationPolicy)
	if !ok {
		return nil
	}
	var names, ips []string
	if c, err := capture.Parse(p.Spec.Capture); err == nil {
		names = c.Pools()
	}
	for _, n := range p.Status.Nodes {
		for _, a := range n.Addresses {
			names, ips = append(names, a.Pool), append(ips, a.IP)
		}
	}
	var pools ippoolv1.NodeIPPoolList
	if len(ips) > 0 && r.Client.List(ctx, &pools) == nil {
		for i := range pools.Items {
			if rng, err := poolstatus.Range(&pools.Items[i]); err == nil && holdsAny(rng, ips) {
				names = append(names, pools.Items[i].Name)
			}
		}
	}
	slices.Sort(names)
	return requestsFor(func(client.Object) []string { return slices.Compact(names) })(ctx, o)
}

// holdsAny reports whether one of ips lies within rng.
func holdsAny(rng *ippool.Range, ips []string) bool {
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil {
			if _, err := rng.Offset(ip); err == nil {
				return true
			}
		}
	}
	return false
}

// requestsFor turns a function naming pools into a map function.
func requestsFor(pools func(client.Object) []string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		for _, p := range pools(o) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p}})
		}
		return reqs
	}
}

// poolsOfEnactment names the pools an enactment concerns: those it records
// addresses of, the ones it asks or waits for, and the one its reset
// annotation names.
func poolsOfEnactment(o client.Object) []string {
	e, ok := o.(*nncev1beta1.NodeNetworkConfigurationEnactment)
	if !ok {
		return nil
	}
	var pools []string
	for pool := range e.Status.IPPool {
		pools = append(pools, pool)
	}
	if pool := e.Status.WaitingForIPPool; pool != "" {
		pools = append(pools, pool)
	}
	if enactmentrecord.Requesting(e) {
		pools = append(pools, enactmentrecord.RequestedPools(e)...)
	}
	pools = append(pools, resetPool(e)...)
	slices.Sort(pools)
	return slices.Compact(pools)
}

// resetPool names the pool an object's reset annotation names, if any.
func resetPool(o client.Object) []string {
	if pool := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]; pool != "" {
		return []string{pool}
	}
	return nil
}

// The pool controller's permissions (generated into deploy/rbac/pool-controller).
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodeippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationenactments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkconfigurationpolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nmstate.io,resources=nodenetworkstates,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=nmstate.io,resources=poolednodenetworkconfigurationpolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Leader election needs leases in the controller's namespace only:
// deploy/rbac/pool-controller/leader_election.yaml grants them.

package companion

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolmetrics"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/annotations"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// Reconciler keeps the generated NNCPs and the records of pooled
// policies. Set every field.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads what a lagging cache could get wrong: the network
	// states a release reads, the pools' entries.
	APIReader client.Reader
	// Pools writes pool statuses.
	Pools *poolwrite.Writer
	// Recorder emits Events on pooled policies.
	Recorder events.EventRecorder
	// Clock stamps conditions and entries.
	Clock clock.Clock
	// RemovalRetry is how long after a node failed to apply the policy
	// that takes its released addresses off that policy is written again
	// (doubling with each attempt).
	RemovalRetry time.Duration
	// RenewStates deletes a NodeNetworkState a node waits on that has
	// held nothing for StatelessGrace (default 30 s), for its handler to
	// create it again with its state (renewStateless): set in companion
	// mode, beside kubernetes-nmstate's handler.
	RenewStates    bool
	StatelessGrace time.Duration
	// Waiting is told which nodes of a pooled policy wait on an exhausted
	// pool (the metric nmstate_ippool_waiting_holders); nil tells nothing.
	Waiting *poolmetrics.Waiting
	// Carried tells what every node's network carries, which an address
	// given to a node avoids (carriers.Watch); nil lists the states from
	// the API server for every allocation. SetupWithManager watches them.
	Carried *carriers.Carriers

	// written holds, by name, the incarnation and generation (a
	// writtenAt) of each generated policy this process last created or
	// changed: the next pass may start before the cache has seen that
	// write, and must neither count the node as idle nor write it again.
	written sync.Map
	// cleared holds, by name, the UID of each enactment clearEarlier
	// deleted, until the cache shows another enactment of the name
	// (wasCleared): an earlier policy's state is never taken for the new
	// one's.
	cleared sync.Map
	// renders holds, by pooled policy UID and node, the node's last
	// rendered state (rendered): a pass renders only what changed.
	renders sync.Map
	// stateWaits remembers since when each node of each pooled policy
	// waits for its first NodeNetworkState (lookAgain).
	stateWaits stateWaits
	// stateless remembers since when each NodeNetworkState seen without
	// a state has been so (renewStateless).
	stateless statelessSeen
	// reads holds what this process wrote or read of the generated
	// policies' specs and statuses, which its cache does not hold
	// (specOf, unhandled).
	reads policyReads
}

// gone forgets a pooled policy deleted for good: none of its nodes waits
// on a pool, and none of its generated policies is held for it.
func (r *Reconciler) gone(ctx context.Context, name string) error {
	r.Waiting.Replace(holder.PooledPolicyKind+"/"+name, nil)
	r.stateWaits.forget(name)
	return r.unstrandAll(ctx, name)
}

// reportWaiting tells Waiting which of the policy's nodes this pass found
// no address for in a full pool.
func (r *Reconciler) reportWaiting(w *world) {
	var waits []poolmetrics.Wait
	for node, pools := range w.full {
		for _, p := range pools {
			waits = append(waits, poolmetrics.Wait{Holder: holder.ForPolicyNode(w.policy.Name, node).String(), Pool: p})
		}
	}
	r.Waiting.Replace(holder.PooledPolicyKind+"/"+w.policy.Name, waits)
}

// behindRequeue is how soon a pooled policy whose cached copy is older
// than the API server's is looked at again (its watch event usually
// brings it back sooner).
const behindRequeue = 200 * time.Millisecond

// cacheBehind reports whether the API server has a newer copy of p than
// the cache gave. A pass quarantines addresses its records name before
// it writes the status, and a quarantine written from a stale record
// (after a watch outage, or before this controller's last status write
// reached the cache) could take an address that has since been given to
// another node, and be lifted later on the wrong node's evidence: the
// records a pass acts on must be the latest. Its metadata is read, not
// the whole policy: the status holds every node's record, and this read
// is made every pass.
func (r *Reconciler) cacheBehind(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) (bool, error) {
	fresh := &metav1.PartialObjectMetadata{}
	fresh.SetGroupVersionKind(ippoolv1.GroupVersion.WithKind(holder.PooledPolicyKind))
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p), fresh)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil // gone: nothing to act on
	case err != nil:
		return false, fmt.Errorf("get %s %s: %w", holder.PooledPolicyKind, p.Name, err)
	case fresh.UID != p.UID || fresh.ResourceVersion != p.ResourceVersion:
		ctrl.LoggerFrom(ctx).V(1).Info("the cache is behind the API server; looking again", "cached", p.ResourceVersion, "latest", fresh.ResourceVersion)
		return true, nil
	}
	return false, nil
}

// Reconcile keeps one pooled policy: fetch → finalizer → observe → pool
// writes (resets, departures, releases, allocations) → one status write
// (records and conditions) → the generated NNCPs, paced → resets cleared
// → finalizer off once a deleted policy holds nothing.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.gone(ctx, req.Name)
		}
		return ctrl.Result{}, err
	}
	deleting := !p.DeletionTimestamp.IsZero()
	if deleting && !controllerutil.ContainsFinalizer(&p, ippoolv1.FinalizerPooledPolicy) {
		return ctrl.Result{}, nil
	}
	if !deleting && !controllerutil.ContainsFinalizer(&p, ippoolv1.FinalizerPooledPolicy) {
		patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&p, ippoolv1.FinalizerPooledPolicy)
		if err := r.Client.Patch(ctx, &p, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add the finalizer to %s %s: %w", holder.PooledPolicyKind, p.Name, err)
		}
	}
	if behind, err := r.cacheBehind(ctx, &p); err != nil || behind {
		return ctrl.Result{RequeueAfter: behindRequeue}, err
	}
	w, err := r.observe(ctx, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.holdGenerated(ctx, w); err != nil {
		return ctrl.Result{}, err
	}
	next := p.DeepCopy()
	problems, err := r.holdings(ctx, w, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	pl := r.plan(ctx, w, next)
	problems = append(problems, pl.problems...)
	if err := r.writeRecord(ctx, w, &p, next, problems, pl); err != nil {
		return ctrl.Result{}, err
	}
	if w.invalid == nil {
		// Done once the status holds the new records: a reset that waits
		// for the policy to be corrected keeps its annotation.
		for _, o := range w.resets.annotated {
			if err := annotations.RemoveAnnotation(ctx, r.Client, o, ippoolv1.ResetIPPoolAnnotation); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if err := r.guardRecorded(ctx, w, next); err != nil {
		return ctrl.Result{}, err
	}

	if err := r.apply(ctx, next, pl, w.retries); err != nil {
		return ctrl.Result{}, err
	}
	if deleting && len(next.Status.Nodes) == 0 && len(w.generated) == 0 {
		return ctrl.Result{}, r.removeFinalizer(ctx, next)
	}
	return ctrl.Result{RequeueAfter: r.nextLook(w, pl, problems)}, nil
}

// holdings does the pool writes of one pass, each before the status write
// that depends on it: departed nodes, releases and resets quarantine (and
// confirmed releases are confirmed) first, allocations take addresses for
// the nodes that lack them. It changes next's records.
func (r *Reconciler) holdings(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) ([]problem, error) {
	// One list of the pools for the pass's quarantines and confirmations,
	// however many nodes they are for.
	ctx = poolwrite.OnePoolList(ctx)
	if err := r.depart(ctx, w, next); err != nil {
		return nil, err
	}
	problems, err := r.release(ctx, w, next)
	if err != nil {
		return nil, err
	}
	if err := r.settle(ctx, w, next); err != nil {
		return nil, err
	}
	if w.invalid != nil {
		r.reportWaiting(w) // none: nothing is allocated for a policy that cannot render
		return problems, nil
	}
	if err := r.outside(ctx, w, next); err != nil {
		return nil, err
	}
	if err := r.reset(ctx, w, next); err != nil {
		return nil, err
	}
	more, err := r.allocate(ctx, w, next)
	if err != nil {
		return nil, err
	}
	r.reportWaiting(w)
	broken, err := r.breakFirst(ctx, w, next)
	return append(append(problems, more...), broken...), err
}

// world is what one pass knows of a pooled policy and its surroundings.
type world struct {
	policy   *ippoolv1.PooledNodeNetworkConfigurationPolicy
	deleting bool
	captures capture.Captures
	// plain are the captures kubernetes-nmstate's handler resolves.
	plain map[string]string
	// invalid says why the captures or the template can never render.
	invalid error
	// nodes are every Node, by name; selected the names of those the
	// policy selects (none while it is deleted), sorted. The Nodes and
	// the enactments are the cache's own objects, not copies (a pass
	// reads every Node and every enactment of its policies): read only,
	// a change to one would change the cache under every reader.
	nodes    map[string]*corev1.Node
	selected []string
	// byHostname indexes nodes by their kubernetes.io/hostname label
	// (withHostname).
	byHostname map[string][]string
	// generated are the policy's NNCPs, by node, as metadata (their
	// spec and status are read when needed: specOf, unhandled);
	// enactments kubernetes-nmstate's enactments of them, by name.
	generated  map[string]*metav1.PartialObjectMetadata
	enactments map[string]*nncev1beta1.NodeNetworkConfigurationEnactment
	// pools are the pools the captures name that exist, by name.
	pools  map[string]*ippoolv1.NodeIPPool
	resets resets
	// removals are the desired states that take released addresses off
	// their nodes, by node (release); retries the nodes whose removal
	// failed and is written again as a new attempt (with the Event's
	// message), and retryIn how soon the next one is due.
	removals map[string][]byte
	retries  map[string]string
	retryIn  time.Duration
	// full names, by node, the pools that had no address for it in this
	// pass's allocation.
	full map[string][]string
	// waitingForState are the nodes that wait for their first
	// NodeNetworkState (NodeStateUnknown): looked at again soon.
	waitingForState map[string]bool
	// emptyStates holds, by node, whether the NodeNetworkState of a node
	// that waits for its state exists and holds nothing, for the nodes
	// this pass has read (renewStateless).
	emptyStates map[string]bool
	// taken are the addresses this pass's allocations hold in flight, by
	// pool: withdrawn when the status write that records them is refused.
	taken map[string]takenFrom
}

// resets are the reset annotations for the policy's nodes.
type resets struct {
	// pools lists, by node, the pools whose addresses to reset.
	pools map[string][]string
	// annotated are the objects whose annotation to remove when done.
	annotated []client.Object
}

// isSelected reports whether the policy selects node now.
func (w *world) isSelected(node string) bool {
	_, found := slices.BinarySearch(w.selected, node)
	return found
}

// observe reads what a pass needs from the cache.
func (r *Reconciler) observe(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) (*world, error) {
	w := &world{policy: p, deleting: !p.DeletionTimestamp.IsZero(), nodes: map[string]*corev1.Node{},
		generated: map[string]*metav1.PartialObjectMetadata{}, pools: map[string]*ippoolv1.NodeIPPool{},
		enactments: map[string]*nncev1beta1.NodeNetworkConfigurationEnactment{}, resets: resets{pools: map[string][]string{}},
		full: map[string][]string{}, waitingForState: map[string]bool{}}
	w.captures, w.invalid = capture.ParsePolicy(p.Spec.Capture, p.Spec.DesiredState.Raw)
	if w.invalid == nil {
		w.plain, w.invalid = w.captures.Plain()
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	selector := labels.SelectorFromSet(p.Spec.NodeSelector)
	for i := range nodes.Items {
		n := &nodes.Items[i]
		w.nodes[n.Name] = n
		if !w.deleting && n.DeletionTimestamp.IsZero() && selector.Matches(labels.Set(n.Labels)) {
			w.selected = append(w.selected, n.Name)
		}
	}
	slices.Sort(w.selected)
	if err := r.observeGenerated(ctx, w); err != nil {
		return nil, err
	}
	for _, name := range w.captures.Pools() {
		var pool ippoolv1.NodeIPPool
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &pool)
		switch {
		case err == nil:
			w.pools[name] = &pool
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("get NodeIPPool %s: %w", name, err)
		}
	}
	if err := w.resets.ask(ctx, r.APIReader, p, w.recorded()...); err != nil {
		return nil, err
	}
	return w, nil
}

// observeGenerated reads the policy's generated NNCPs, their enactments
// and the resets they ask for.
func (r *Reconciler) observeGenerated(ctx context.Context, w *world) error {
	p := w.policy
	generated := policymeta.List()
	if err := r.Client.List(ctx, generated, client.MatchingLabels{ippoolv1.PooledPolicyLabel: p.Name}); err != nil {
		return fmt.Errorf("list the policies of %s %s: %w", holder.PooledPolicyKind, p.Name, err)
	}
	for i := range generated.Items {
		g := &generated.Items[i]
		node := g.Annotations[ippoolv1.PooledNodeAnnotation]
		if node == "" || !ownedBy(g, p) && !orphanedBy(g, p) {
			if stranded(g, p.UID) {
				if err := r.unstrand(ctx, g); err != nil {
					return err
				}
			}
			continue
		}
		w.generated[node] = g
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		err := r.Client.Get(ctx, shared.EnactmentKey(node, g.Name), &e, client.UnsafeDisableDeepCopy)
		switch {
		case err == nil && !r.wasCleared(&e):
			w.enactments[e.Name] = &e
		case err == nil:
			// Deleted by clearEarlier, still in the cache: an earlier
			// policy's.
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("get enactment %s: %w", shared.EnactmentKey(node, g.Name).Name, err)
		}
		if err := w.resets.ask(ctx, r.APIReader, g, node); err != nil {
			return err
		}
	}
	return nil
}

// wasCleared reports whether e is an enactment clearEarlier deleted,
// which the cache still shows; once the cache shows another enactment of
// the name, it forgets the deleted one.
func (r *Reconciler) wasCleared(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	uid, ok := r.cleared.Load(e.Name)
	if ok && uid == e.UID {
		return true
	}
	r.cleared.Delete(e.Name)
	return false
}

// recorded lists the nodes the policy holds a record of.
func (w *world) recorded() []string {
	out := make([]string, 0, len(w.policy.Status.Nodes))
	for _, n := range w.policy.Status.Nodes {
		out = append(out, n.Node)
	}
	return out
}

// ask notes the reset of nodes' addresses that o (the pooled policy, or a
// node's generated NNCP) asks for, if any. The annotation is confirmed on
// the API server: right after a reset the cache may still show one this
// controller removed, and acting on it again would renumber the nodes
// twice.
func (rs *resets) ask(ctx context.Context, reader client.Reader, o client.Object, nodes ...string) error {
	pool := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]
	if pool == "" {
		return nil
	}
	fresh := o.DeepCopyObject().(client.Object)
	if err := reader.Get(ctx, client.ObjectKeyFromObject(o), fresh); err != nil {
		return client.IgnoreNotFound(err)
	}
	if fresh.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation] != pool {
		return nil // done already
	}
	rs.annotated = append(rs.annotated, o)
	for _, node := range nodes {
		if !slices.Contains(rs.pools[node], pool) {
			rs.pools[node] = append(rs.pools[node], pool)
		}
	}
	return nil
}

// ownedBy reports whether the pooled policy p controls g.
func ownedBy(g client.Object, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) bool {
	for _, ref := range g.GetOwnerReferences() {
		if ref.UID == p.UID && ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// orphanedBy reports whether g is the generated policy of one of p's
// nodes that the garbage collector orphaned (kubectl delete
// --cascade=orphan removes the owner references of a deleted owner's
// dependents): it still carries addresses from the pools, which p must
// take off before they can go to another node.
func orphanedBy(g *metav1.PartialObjectMetadata, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) bool {
	if p.DeletionTimestamp.IsZero() || metav1.GetControllerOf(g) != nil {
		return false
	}
	node := g.Annotations[ippoolv1.PooledNodeAnnotation]
	if rec := p.Status.NodeOf(node); rec != nil && rec.Policy == g.Name {
		return true
	}
	// Its record gone already (a pass that dropped it and stopped before
	// deleting it): still p's by its name.
	return g.Name == ippoolv1.NodePolicyName(p.Name, node)
}

// removeFinalizer lets a deleted pooled policy go.
func (r *Reconciler) removeFinalizer(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(p, ippoolv1.FinalizerPooledPolicy)
	if err := r.Client.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove the finalizer of %s %s: %w", holder.PooledPolicyKind, p.Name, err)
	}
	return nil
}

// holderOf names a node of the policy where pool entries name a holder,
// and the token of its in-flight entries: the resourceVersion of the
// policy the pass read, which guards its status write. The pool
// controller fences an entry not recorded past the grace period by
// writing the policy, so a stalled pass can never record it.
func holderOf(p *ippoolv1.PooledNodeNetworkConfigurationPolicy, node string) (h holder.Ref, token string) {
	return holder.ForPolicyNode(p.Name, node), p.ResourceVersion
}

// sameStatus reports whether two versions of a policy have the same
// status.
func sameStatus(a, b *ippoolv1.PooledNodeNetworkConfigurationPolicy) bool {
	return reflect.DeepEqual(a.Status, b.Status)
}

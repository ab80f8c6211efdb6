package companion

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// A Node deleted while its machine runs. kubernetes-nmstate never undoes
// a deleted policy, and no agent of ours runs on the machine: once its
// Node and its generated policies are gone, nothing would take its
// addresses off. So a Node a pooled policy records addresses of carries
// FinalizerPooledNode, and its deletion is a release like any other: the
// Node is no longer selected, its generated policy takes the addresses
// off, and once kubernetes-nmstate's handler on the machine (still
// running: its Node exists) has applied that, the record goes, and then
// the finalizer. Two rules make it hold whatever the interleaving:
//   - guard: a generated policy that puts addresses on a node is written
//     only after the API server showed its Node not deleted and carrying
//     the finalizer (added then if missing);
//   - nodeReconciler removes the finalizer only from a deleted Node, and
//     only once the API server shows no pooled policy recording it.
//
// A deleted Node is never selected, so no record of it is written after
// its deletion, and a policy written before it was guarded: the finalizer
// stays until every record of the node went through a release.
//
// The way out for a machine that is shut down for good (it can never
// apply a policy again): the Kubernetes taint for that,
// node.kubernetes.io/out-of-service, on the deleted Node. Its addresses
// are then quarantined for its return and its records dropped, as for a
// Node already gone; the pool controller frees them once the departure
// hold has passed.

// nodeRequeue is how often a deleted Node that still has records is
// looked at again, besides the events of the pooled policies.
const nodeRequeue = 10 * time.Second

// terminating reports whether a Node is being deleted.
func terminating(n *corev1.Node) bool {
	return n != nil && !n.DeletionTimestamp.IsZero()
}

// shutDown reports whether an admin said, with the out-of-service taint,
// that a deleted Node's machine is shut down.
func shutDown(n *corev1.Node) bool {
	return terminating(n) && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeOutOfService
	})
}

// notReady reports whether a Node's kubelet says, or has stopped saying,
// that it is not Ready. A Node with no Ready condition at all, or none,
// is not judged.
func notReady(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return false
}

// departureChanged reports whether a Node's update changes how it
// departs: deleted, tainted out of service, Ready or not, or a live Node
// stripped of the finalizer.
func departureChanged(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*corev1.Node)
	cur, okNew := e.ObjectNew.(*corev1.Node)
	if !okOld || !okNew {
		return true
	}
	lost := controllerutil.ContainsFinalizer(old, ippoolv1.FinalizerPooledNode) && !controllerutil.ContainsFinalizer(cur, ippoolv1.FinalizerPooledNode)
	return terminating(old) != terminating(cur) || shutDown(old) != shutDown(cur) || notReady(old) != notReady(cur) ||
		(lost && !terminating(cur))
}

// guard says whether a generated policy may put addresses on node now: its
// Node, read from the API server, exists, is not being deleted, and
// carries FinalizerPooledNode, which guard adds when it is missing.
func (r *Reconciler) guard(ctx context.Context, node string) (bool, error) {
	ok := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			return err
		}
		ok = !terminating(&n)
		if !ok || controllerutil.ContainsFinalizer(&n, ippoolv1.FinalizerPooledNode) {
			return nil
		}
		patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&n, ippoolv1.FinalizerPooledNode)
		return r.Client.Patch(ctx, &n, patch)
	})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("add the finalizer %s to Node %s: %w", ippoolv1.FinalizerPooledNode, node, err)
	}
	return ok, nil
}

// guardRecorded gives every live Node that next records addresses of the
// finalizer, where the cache shows it without: Nodes recorded before this
// version, or stripped of it by hand, whose policies need no write.
func (r *Reconciler) guardRecorded(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for _, rec := range next.Status.Nodes {
		n := w.nodes[rec.Node]
		if n == nil || terminating(n) || len(rec.Held()) == 0 || controllerutil.ContainsFinalizer(n, ippoolv1.FinalizerPooledNode) {
			continue
		}
		if _, err := r.guard(ctx, rec.Node); err != nil {
			return err
		}
	}
	return nil
}

// nodeReconciler lets a deleted Node go once no pooled policy records it.
type nodeReconciler struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
	// told holds the UIDs of the Nodes whose wait was said in an Event.
	told sync.Map
}

// Reconcile removes FinalizerPooledNode from a deleted Node that no pooled
// policy records, read from the API server; one that some do waits, and
// says so once in an Event on the Node.
func (r *nodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var n corev1.Node
	if err := r.client.Get(ctx, req.NamespacedName, &n); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !terminating(&n) || !controllerutil.ContainsFinalizer(&n, ippoolv1.FinalizerPooledNode) {
		return ctrl.Result{}, nil
	}
	holders, err := r.holders(ctx, n.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(holders) > 0 {
		if _, told := r.told.LoadOrStore(n.UID, true); !told {
			r.recorder.Eventf(&n, nil, corev1.EventTypeNormal, ippoolv1.ReasonNodeDeletionWaits, "Release",
				"Node %s goes once kubernetes-nmstate's handler on its machine has taken off the addresses of %s; if the machine is "+
					"shut down for good, say so: kubectl taint node %s %s=nodeshutdown:NoExecute",
				n.Name, strings.Join(holders, ", "), n.Name, corev1.TaintNodeOutOfService)
		}
		return ctrl.Result{RequeueAfter: nodeRequeue}, nil
	}
	patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(&n, ippoolv1.FinalizerPooledNode)
	if err := r.client.Patch(ctx, &n, patch); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("remove the finalizer %s of Node %s: %w", ippoolv1.FinalizerPooledNode, n.Name, err)
	}
	r.told.Delete(n.UID)
	ctrl.LoggerFrom(ctx).Info("let a deleted Node go: no pooled policy records it")
	return ctrl.Result{}, nil
}

// holders lists, as "PooledNodeNetworkConfigurationPolicy <name> (ips)",
// the pooled policies that record node, read from the API server: a cached
// list could miss a record written a moment ago.
func (r *nodeReconciler) holders(ctx context.Context, node string) ([]string, error) {
	var list ippoolv1.PooledNodeNetworkConfigurationPolicyList
	if err := r.reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list pooled policies: %w", err)
	}
	var out []string
	for _, p := range list.Items {
		if rec := p.Status.NodeOf(node); rec != nil {
			out = append(out, fmt.Sprintf("PooledNodeNetworkConfigurationPolicy %s (%s)", p.Name, ips(rec.Held())))
		}
	}
	return out, nil
}

// recordedNodes maps a pooled policy to the deleted Nodes it records (of
// its old and its new version, on an update): a record that goes may let
// one go.
func (r *nodeReconciler) recordedNodes(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*ippoolv1.PooledNodeNetworkConfigurationPolicy)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, rec := range p.Status.Nodes {
		var n corev1.Node
		if err := r.client.Get(ctx, types.NamespacedName{Name: rec.Node}, &n); err == nil && terminating(&n) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: rec.Node}})
		}
	}
	return reqs
}

package companion

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate/kubernetes-nmstate/api/shared"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// depart releases the addresses of nodes whose Node is gone, or deleted
// and tainted out of service (its machine shut down for good):
// quarantined, kept for the node's return (the pool controller frees them
// once the departure hold has passed, and the Node is gone), and the
// record dropped; the node's NNCP goes in plan. A Node deleted while its
// machine runs is not gone: its finalizer keeps it until its release is
// applied (nodes.go).
func (r *Reconciler) depart(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) error {
	for i := range next.Status.Nodes {
		if n, ok := w.nodes[next.Status.Nodes[i].Node]; ok {
			// A node replaced under its name carries its record's
			// addresses: its quarantines must name the new machine.
			next.Status.Nodes[i].NodeUID = n.UID
		}
	}
	for _, rec := range slices.Clone(next.Status.Nodes) {
		n, ok := w.nodes[rec.Node]
		if ok && !shutDown(n) {
			continue
		}
		if err := r.giveUp(ctx, w, &rec); err != nil {
			return err
		}
		dropRecord(next, rec.Node)
		if ok {
			r.Recorder.Eventf(w.policy, nil, corev1.EventTypeNormal, ippoolv1.ReasonMachineShutDown, "Release",
				"Node %s is deleted and tainted %s: %s let go without its handler's word, kept for its return", rec.Node,
				corev1.TaintNodeOutOfService, ips(rec.Held()))
		}
		ctrl.LoggerFrom(ctx).Info("released the addresses of a deleted node", "node", rec.Node, "ips", ips(rec.Held()), "shutDown", ok)
	}
	return nil
}

// release takes the addresses off the nodes the policy no longer selects
// (all of them once it is deleted): quarantined and marked releasing
// first; then, in plan, the node's NNCP is changed to a state without
// them (its own desired state less those addresses, which nmstate applies
// as the interface's whole address list); once kubernetes-nmstate's
// handler has applied that (its enactment Available), the release is
// confirmed on the quarantines and the record goes (and the NNCP, in
// plan). A node whose NNCP never existed goes at once, unconfirmed: the
// pool controller then waits for a state the node publishes after. A
// removal that fails keeps the record, and says so.
func (r *Reconciler) release(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) ([]problem, error) {
	w.removals, w.retries = map[string][]byte{}, map[string]string{}
	var problems []problem
	var done []string
	for i := range next.Status.Nodes {
		rec := &next.Status.Nodes[i]
		if w.isSelected(rec.Node) && !rec.Releasing {
			continue
		}
		if !rec.Releasing {
			if err := r.giveUp(ctx, w, rec); err != nil {
				return nil, err
			}
			rec.Releasing = true
			r.Recorder.Eventf(w.policy, nil, corev1.EventTypeNormal, ippoolv1.ReasonAddressesReleased, "Release",
				"Releasing %s of node %s (%s): its policy %s takes them off its interfaces", ips(rec.Held()), rec.Node,
				releaseWhy(w), rec.Policy)
		}
		outcome, err := r.removed(ctx, w, rec)
		switch {
		case err != nil:
			return nil, err
		case outcome.failed == "" && !outcome.confirmed && !outcome.gone && notReady(w.nodes[rec.Node]):
			problems = append(problems, stalledRelease(w.nodes[rec.Node], rec))
		case outcome.failed != "":
			problems = append(problems, problem{shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, outcome.failed})
		case outcome.confirmed:
			if err := lifecycle.Confirm(ctx, r.Pools, lifecycle.OfPolicyNode(w.policy, rec, rec.Held())); err != nil {
				return nil, err
			}
			done = append(done, rec.Node)
		case outcome.gone:
			done = append(done, rec.Node)
		}
	}
	next.Status.Nodes = slices.DeleteFunc(next.Status.Nodes, func(rec ippoolv1.PooledPolicyNode) bool {
		return slices.Contains(done, rec.Node)
	})
	return problems, nil
}

// stalledRelease says why the release of rec waits on its Node, which is
// not Ready: nothing takes the addresses off until kubernetes-nmstate's
// handler on it runs again, or its machine is declared shut down.
func stalledRelease(n *corev1.Node, rec *ippoolv1.PooledPolicyNode) problem {
	if terminating(n) {
		return problem{ippoolv1.ReasonNodeDeletionWaits, fmt.Sprintf("Node %s is being deleted and is not Ready: it goes, and %s are let go, "+
			"once kubernetes-nmstate's handler on it has taken them off; "+machineGone, rec.Node, ips(rec.Held()))}
	}
	return problem{ippoolv1.ReasonNodeNotReady, fmt.Sprintf("Node %s is not Ready: %s stay recorded and quarantined until "+
		"kubernetes-nmstate's handler on it has applied policy %s, which takes them off; "+machineGone, rec.Node, ips(rec.Held()), rec.Policy)}
}

// removal is where a release stands.
type removal struct {
	// confirmed: a state without the addresses was applied.
	confirmed bool
	// gone: the node never had an NNCP, nothing of ours can carry them.
	gone bool
	// failed says why the removal failed; failedAt is when its policy
	// failed on the node (zero when it cannot be applied at all).
	failed   string
	failedAt time.Time
}

// removed says where the release of rec stands, and leaves the removal
// state to write, if any, in w.removals.
func (r *Reconciler) removed(ctx context.Context, w *world, rec *ippoolv1.PooledPolicyNode) (removal, error) {
	if g := w.generated[rec.Node]; g != nil && r.unhandled(ctx, w, rec.Node) {
		return removal{failed: fmt.Sprintf("node %s runs no kubernetes-nmstate handler (policy %s matches no node it runs on): %s stay recorded "+
			"and quarantined until one runs there and takes them off; "+machineGone, rec.Node, g.Name, ips(rec.Held()))}, nil
	}
	out, without, err := r.takenOff(ctx, w, rec, rec.Held())
	if without != nil {
		w.removals[rec.Node] = without
	}
	if g := w.generated[rec.Node]; err == nil && !out.failedAt.IsZero() && g != nil && isRemoval(g) && !notReady(w.nodes[rec.Node]) {
		err = r.retry(ctx, w, rec, g, out.failedAt)
	}
	return out, err
}

// retry writes again, once its backoff has passed, the policy that failed
// to take rec's addresses off its node: kubernetes-nmstate's handler
// gives up on a generation once its own retries are exhausted, and
// applies only a new one (releaseAttempt). The backoff doubles with each
// attempt, from RemovalRetry up to 32 times it. A node that is not Ready
// is not tried again until it is: it could not apply it. The Event is
// raised once the policy is written (apply).
func (r *Reconciler) retry(ctx context.Context, w *world, rec *ippoolv1.PooledPolicyNode, g *metav1.PartialObjectMetadata, failedAt time.Time) error {
	attempt, base := releaseAttempt(g), r.RemovalRetry
	if base <= 0 {
		base = time.Minute
	}
	due := failedAt.Add(base << min(attempt, 5))
	if wait := due.Sub(r.Clock.Now()); wait > 0 {
		if w.retryIn == 0 || wait < w.retryIn {
			w.retryIn = wait
		}
		return nil
	}
	state, err := r.desiredOf(ctx, g)
	if err != nil {
		return err
	}
	w.removals[rec.Node] = state
	w.retries[rec.Node] = fmt.Sprintf("Trying again to take %s off node %s: policy %s failed on it at %s (attempt %d)",
		ips(rec.Held()), rec.Node, g.Name, failedAt.UTC().Format(time.RFC3339), attempt+2)
	return nil
}

// failedSince returns when an enactment's Failing or Aborted condition
// became True, by the API server's clock: when its status was last
// written (statusWrittenAt), which is then or later. The condition's own
// time is its node's clock, and serves only when the managedFields say
// nothing: a node an hour ahead would put every retry an hour off.
func failedSince(e *nncev1beta1.NodeNetworkConfigurationEnactment) time.Time {
	if at, ok := statusWrittenAt(e); ok {
		return at
	}
	for _, c := range e.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// takenOff says whether addrs of rec are off its node as far as its
// generated policy tells, and, while that policy still has them, the
// state to write that takes them off (its own, less them):
//   - no policy with them was ever written: nothing of ours put them on
//     the node, and a state of the node without them, however old, says
//     it does not carry them otherwise (confirmed);
//   - the policy is gone, deleted by someone else: kubernetes-nmstate's
//     handler leaves its last state on the node, so the pool controller
//     waits for a state published after the release (gone);
//   - the policy without them was applied (confirmed), failed (failed),
//     or is being applied (nothing yet).
func (r *Reconciler) takenOff(ctx context.Context, w *world, rec *ippoolv1.PooledPolicyNode, addrs []ippoolv1.PooledAddress) (removal, []byte, error) {
	g := w.generated[rec.Node]
	if g == nil {
		exists, err := r.exists(ctx, rec.Policy)
		switch {
		case err != nil || exists:
			return removal{}, nil, err // the cache has not seen it yet
		case !rec.Generated:
			return removal{confirmed: true}, nil, nil
		}
		return removal{gone: true}, nil, nil
	}
	var drop []netip.Addr
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			drop = append(drop, ip)
		}
	}
	st := policystatus.StateOf(w.enactmentOf(rec.Node), g.Generation)
	state, err := r.desiredOf(ctx, g)
	if err != nil {
		return removal{}, nil, err
	}
	without, _, err := netstate.WithoutAddresses(state, drop)
	switch {
	case err != nil:
		return removal{failed: fmt.Sprintf("the addresses %s of node %s cannot be taken off by policy %s: %v; they stay recorded and quarantined; "+machineGone,
			ips(addrs), rec.Node, g.Name, err)}, nil, nil
	case without != nil:
		return removal{}, without, nil
	case st == policystatus.Available:
		return removal{confirmed: true}, nil, nil // applied without them
	case st == policystatus.Failing || st == policystatus.Aborted:
		return removal{failedAt: failedSince(w.enactmentOf(rec.Node)), failed: fmt.Sprintf("node %s could not apply policy %s, which takes %s off its interfaces (see its enactment %s); "+
			"the addresses stay recorded and quarantined until it does; "+machineGone,
			rec.Node, g.Name, ips(addrs), shared.EnactmentKey(rec.Node, g.Name).Name)}, nil, nil
	}
	return removal{}, nil, nil // being applied
}

// exists reports whether the API server has the NNCP called name (the
// cache may not have seen one created a moment ago).
func (r *Reconciler) exists(ctx context.Context, name string) (bool, error) {
	m, err := r.onServer(ctx, name)
	return m != nil, err
}

// onServer returns the metadata of the NNCP called name as the API server
// has it (the cache may not have seen it created or deleted a moment
// ago), or nil when there is none.
func (r *Reconciler) onServer(ctx context.Context, name string) (*metav1.PartialObjectMetadata, error) {
	m := policymeta.Object(name)
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, m)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get policy %s: %w", name, err)
	}
	return m, nil
}

// machineGone ends the message of a release that cannot finish: the way
// out is only for a machine that no longer runs, since nothing then takes
// the addresses off a machine that still does; they are free once the
// departure hold has passed.
const machineGone = "if its machine is shut down for good, delete its Node and taint it " + corev1.TaintNodeOutOfService +
	"=nodeshutdown:NoExecute: the addresses are let go then, kept for its return (a Node deleted while its machine runs waits for its handler)"

// releaseWhy says why a pass releases a node's addresses.
func releaseWhy(w *world) string {
	switch {
	case w.deleting && slices.Contains(w.policy.Finalizers, metav1.FinalizerOrphanDependents):
		return "the policy is being deleted; its generated policies go too, though the deletion asked to orphan them: " +
			"their addresses belong to the pools, which would hand them to other nodes"
	case w.deleting:
		return "the policy is being deleted"
	}
	return "the policy no longer selects it"
}

// giveUp quarantines every address of a node's record (lifecycle.Release),
// kept for the node's return unless the policy is being deleted.
func (r *Reconciler) giveUp(ctx context.Context, w *world, rec *ippoolv1.PooledPolicyNode) error {
	f := lifecycle.OfPolicyNode(w.policy, rec, rec.Held())
	if w.deleting {
		f = f.WithoutReturn()
	}
	_, err := lifecycle.Release(ctx, r.Pools, f)
	return err
}

// kindOf names the kind of an annotated object, for messages.
func kindOf(o client.Object) string {
	if _, ok := o.(*metav1.PartialObjectMetadata); ok {
		return "NodeNetworkConfigurationPolicy"
	}
	return holder.PooledPolicyKind
}

// dropRecord removes node's record from p's status.
func dropRecord(p *ippoolv1.PooledNodeNetworkConfigurationPolicy, node string) {
	p.Status.Nodes = slices.DeleteFunc(p.Status.Nodes, func(n ippoolv1.PooledPolicyNode) bool { return n.Node == node })
}

// ips lists the addresses of a record, for messages.
func ips(addrs []ippoolv1.PooledAddress) string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.IP)
	}
	return strings.Join(out, ", ")
}

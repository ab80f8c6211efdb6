package companion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// hostnameLabel is the label kubelets set to their node's hostname: the
// generated NNCPs select their node by it, as per-node NNCPs do.
const hostnameLabel = "kubernetes.io/hostname"

// plan is what a pass does to the generated NNCPs.
type plan struct {
	// write are the NNCPs to create or change now, within maxUnavailable;
	// remove those to delete.
	write  []*nmstatev1.NodeNetworkConfigurationPolicy
	remove []*metav1.PartialObjectMetadata
	// waiting counts the changes held back (maxUnavailable reached, a
	// node still progressing, the rollout aborted); progressing the
	// nodes whose NNCP is being applied.
	waiting, progressing int
	// aborted is set once as many nodes failed as maxUnavailable.
	aborted bool
	// summary sums up the selected nodes.
	summary  policystatus.Summary
	problems []problem
}

// plan decides, for every node the policy selects, records or generated
// an NNCP for, the NNCP it should have, and which changes to make now.
func (r *Reconciler) plan(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) plan {
	var pl plan
	pl.summary.Matching = len(w.selected)
	limit, err := policystatus.MaxUnavailable(w.policy.Spec.MaxUnavailable, max(len(w.selected), len(next.Status.Nodes)))
	if err != nil {
		pl.problems = append(pl.problems, problem{ippoolv1.ReasonInvalidCapture, fmt.Sprintf("spec.%v: write a number or a percentage", err)})
		limit = 1
	}
	busy, failed := 0, 0
	var changes []*nmstatev1.NodeNetworkConfigurationPolicy
	for _, node := range planned(w, next) {
		s := r.step(ctx, w, next, node)
		if s.problem != nil {
			pl.problems = append(pl.problems, *s.problem)
		}
		pl.count(s, w.isSelected(node))
		busy += btoi(s.busy)
		failed += btoi(s.failed)
		pl.waiting += btoi(s.waits)
		if s.remove != nil {
			pl.remove = append(pl.remove, s.remove)
		}
		if s.change != nil {
			changes = append(changes, s.change)
		}
	}
	pl.aborted = failed >= limit
	for _, c := range changes {
		switch {
		case busy >= limit, pl.aborted && !isRemoval(c):
			pl.waiting++
		default:
			pl.write = append(pl.write, c)
			busy++
		}
	}
	pl.progressing = busy
	for _, g := range pl.write {
		if rec := next.Status.NodeOf(g.Annotations[ippoolv1.PooledNodeAnnotation]); rec != nil {
			rec.Generated = true // recorded before the policy is written
		}
	}
	if len(pl.problems) > 0 || len(pl.write) > 0 || len(pl.remove) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("planned", "write", len(pl.write), "remove", len(pl.remove), "waiting", pl.waiting, "busy", busy)
	}
	return pl
}

// enactedAt reports whether the node's handler has taken up generation in
// enactment e (applying it, or done with it). A new enactment granted its
// slot for generation on its creation's request (our handler, in handler
// mode) says which generation it applies only with its outcome: it has
// taken up the generation already.
func enactedAt(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) bool {
	return e != nil && (e.Status.PolicyGeneration == generation || enactmentrecord.GrantedOnRequest(e, generation))
}

// count sums up one node's step as kubernetes-nmstate counts its nodes:
// one its handler does not run on not at all, one not Ready without an
// enactment as ignored.
func (pl *plan) count(s nodeStep, selected bool) {
	switch {
	case s.unhandled && selected:
		pl.summary.Matching--
	case s.counted && s.notReady:
		pl.summary.NotReady++
	case s.counted:
		pl.summary.Add(s.state)
	}
}

// planned lists, sorted, the nodes a pass plans for: those the policy
// selects, records or generated a policy for.
func planned(w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) []string {
	nodes := slices.Clone(w.selected)
	for _, rec := range next.Status.Nodes {
		nodes = append(nodes, rec.Node)
	}
	nodes = append(nodes, slices.Collect(maps.Keys(w.generated))...)
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// nodeStep is where one node stands and what a pass would do to its
// generated policy.
type nodeStep struct {
	// busy: it counts against maxUnavailable (being applied, or written
	// by this process and not in the cache yet).
	busy bool
	// unhandled: kubernetes-nmstate's handler does not run on it.
	unhandled bool
	// notReady: its Node is not Ready and has no enactment of its policy.
	notReady bool
	// counted: it counts in the summary, in state.
	counted bool
	state   policystatus.State
	// failed: its policy, as it should be, failed or was aborted.
	failed bool
	// waits: its policy must change but progresses.
	waits bool
	// change is its policy to create or change; remove, to delete.
	change  *nmstatev1.NodeNetworkConfigurationPolicy
	remove  *metav1.PartialObjectMetadata
	problem *problem
}

// step decides one node's step.
func (r *Reconciler) step(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy, node string) nodeStep {
	var s nodeStep
	have := w.generated[node]
	stale := r.stale(ctx, ippoolv1.NodePolicyName(w.policy.Name, node), have)
	st := policystatus.Progressing
	switch {
	case stale:
		s.busy = true
	case r.unhandled(ctx, w, node):
		s.unhandled = true
	case have != nil && !enactedAt(w.enactmentOf(node), have.Generation) && notReady(w.nodes[node]):
		// kubernetes-nmstate ignores a node that is not Ready: one that
		// has not taken up its policy's generation must not hold a slot
		// of maxUnavailable forever.
		s.notReady = true
	case have != nil:
		st = policystatus.StateOf(w.enactmentOf(node), have.Generation)
		s.busy = st == policystatus.Progressing
	}
	want, keep, why := r.desired(ctx, w, next, node)
	if want != nil {
		if shared := selectsOthers(w, node, want); shared != nil {
			// Not written: the literal addresses would be on two NICs.
			want, keep, why = nil, true, shared
		}
	}
	s.problem = why
	s.counted, s.state = w.isSelected(node) && !s.unhandled, policystatus.Progressing
	switch {
	case have != nil && !have.DeletionTimestamp.IsZero() && want != nil && !isRemoval(want):
		// Deleted by someone else while its node keeps its addresses: it
		// goes, and is created again.
		s.remove = have
	case stale, keep:
	case want == nil:
		s.remove = have
	case have != nil && r.same(ctx, have, want):
		s.state = st
		s.failed = s.counted && (st == policystatus.Failing || st == policystatus.Aborted)
	case have != nil && st == policystatus.Progressing && w.enactmentOf(node) != nil:
		s.waits = true // kubernetes-nmstate refuses to change a policy that progresses
	case have != nil:
		// Its metadata as it is (its finalizer: holdGenerated), but the
		// annotations, and the spec wanted.
		updated := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: *have.ObjectMeta.DeepCopy(), Spec: want.Spec}
		updated.Annotations = want.Annotations
		s.change = updated
	default:
		if taken := r.nameTaken(ctx, want.Name, node); taken != nil {
			s.problem = taken
		} else if blocked := r.earlierBlocks(ctx, want.Name, node); blocked != nil {
			s.problem = blocked
		} else {
			s.change = want
		}
	}
	return s
}

// desired returns the NNCP node should have (nil: none), or keep when the
// node's NNCP stays as it is (its addresses are not all there, or its
// state cannot be rendered: why says so).
func (r *Reconciler) desired(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy,
	node string) (want *nmstatev1.NodeNetworkConfigurationPolicy, keep bool, why *problem) {
	rec := next.Status.NodeOf(node)
	switch {
	case rec != nil && rec.Releasing:
		if removal := w.removals[node]; removal != nil {
			return r.generate(w, node, removal, true), false, nil
		}
		return nil, true, nil // being applied: release finishes it
	case w.invalid != nil || !w.isSelected(node):
		return nil, w.invalid != nil && w.generated[node] != nil, nil
	case rec == nil || len(rec.Addresses) < len(w.captures.Refs):
		if without := w.removals[node]; rec != nil && without != nil {
			// A reset's addresses off before their replacements
			// (breakFirst); the node's other addresses stay.
			return r.generate(w, node, without, true), false, nil
		}
		return nil, true, nil
	}
	from, key := renderKey(w, rec), string(w.policy.UID)+"/"+node
	var prev *rendered
	if v, ok := r.renders.Load(key); ok {
		prev = new(v.(rendered))
		if prev.from == from && prev.final {
			return r.generate(w, node, r.settled(ctx, w, node, key, *prev), false), false, nil
		}
	}
	state, why := literal(w, node, rec)
	if why != nil {
		return nil, true, why
	}
	v, err := r.offOthers(ctx, w, node, state, rec)
	if err != nil {
		v = rendered{failed: err.Error(), unreadable: errors.Is(err, errUnreadable)}
	}
	v.from = from
	r.reportRender(ctx, w, node, prev, v)
	r.renders.Store(key, v)
	if err != nil {
		// Not known whether the address is on another interface: the
		// node's policy stays as it is, and the next pass renders again.
		return nil, true, nil
	}
	return r.generate(w, node, v.state, false), false, nil
}

// literal renders node's state from the template with the addresses
// of its record rec, or says why it cannot.
func literal(w *world, node string, rec *ippoolv1.PooledPolicyNode) ([]byte, *problem) {
	addrs := map[string]capture.Address{}
	for _, a := range rec.Addresses {
		ip, err := netip.ParseAddr(a.IP)
		pool := w.pools[a.Pool]
		if err != nil || pool == nil {
			return nil, &problem{ippoolv1.ReasonIPPoolNotFound, fmt.Sprintf(
				"node %s holds %s of NodeIPPool %s, which is gone: its gateway and DNS cannot be read; create the pool again", node, a.IP, a.Pool)}
		}
		rng, err := poolstatus.Range(pool)
		if err != nil {
			return nil, &problem{ippoolv1.ReasonIPPoolInvalid, fmt.Sprintf("NodeIPPool %s has an unusable range: %v", pool.Name, err)}
		}
		addrs[a.Capture] = poolstatus.Address(pool, rng, ip)
	}
	for _, ref := range w.captures.Refs {
		if err := capture.Missing(capture.Needs(w.policy.Spec.DesiredState.Raw, []capture.Ref{ref}), ref.Pool, addrs[ref.Capture]); err != nil {
			return nil, &problem{ippoolv1.ReasonInvalidCapture, err.Error()}
		}
	}
	state, err := capture.Literal(w.policy.Spec.DesiredState.Raw, addrs)
	if err != nil {
		return nil, &problem{ippoolv1.ReasonInvalidCapture, fmt.Sprintf("the desired state cannot be rendered for node %s: %v", node, err)}
	}
	return state, nil
}

// renderKey names what a node's state is rendered from: the policy's
// generation (its template), the node's addresses and their pools'
// incarnations (gateway and DNS are immutable within one).
func renderKey(w *world, rec *ippoolv1.PooledPolicyNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", w.policy.Generation)
	for _, a := range rec.Addresses {
		uid := ""
		if p := w.pools[a.Pool]; p != nil {
			uid = string(p.UID)
		}
		fmt.Fprintf(&b, "|%s=%s@%s", a.Capture, a.IP, uid)
	}
	return b.String()
}

// generate builds the NNCP of node with a desired state.
func (r *Reconciler) generate(w *world, node string, state []byte, removal bool) *nmstatev1.NodeNetworkConfigurationPolicy {
	p := w.policy
	hostname := node
	if n := w.nodes[node]; n != nil && n.Labels[hostnameLabel] != "" {
		hostname = n.Labels[hostnameLabel]
	}
	g := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{
		Name:        ippoolv1.NodePolicyName(p.Name, node),
		Finalizers:  []string{ippoolv1.FinalizerPooledPolicy},
		Labels:      map[string]string{ippoolv1.PooledPolicyLabel: p.Name},
		Annotations: map[string]string{ippoolv1.PooledNodeAnnotation: node},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: ippoolv1.GroupVersion.String(), Kind: holder.PooledPolicyKind,
			Name: p.Name, UID: p.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
	}}
	g.Spec.NodeSelector = map[string]string{hostnameLabel: hostname}
	g.Spec.Capture = w.plain // immutable, as the pooled policy's
	g.Spec.DesiredState = shared.NewState(string(state))
	if removal {
		g.Annotations[ippoolv1.PooledReleaseAnnotation] = "true"
		attempt := 0
		if have := w.generated[node]; have != nil {
			attempt = releaseAttempt(have)
		}
		if w.retries[node] != "" {
			attempt++
		}
		if attempt > 0 {
			// A new generation for each attempt, which is all that
			// kubernetes-nmstate's handler applies again: maxUnavailable
			// 1 or unset, the same for a policy of one node.
			g.Annotations[ippoolv1.PooledReleaseAttemptAnnotation] = strconv.Itoa(attempt)
			if attempt%2 == 1 {
				g.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
			}
		}
	}
	return g
}

// nameTaken says why the name of node's generated policy cannot be
// created (an NNCP of that name that this pooled policy does not own: a
// per-node policy written by hand, or another pooled policy's), or nil.
func (r *Reconciler) nameTaken(ctx context.Context, name, node string) *problem {
	other := policymeta.Object(name)
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, other); err != nil {
		return nil // not found (or unreadable: the create says)
	}
	owner := "no pooled policy"
	if ref := metav1.GetControllerOf(other); ref != nil {
		owner = ref.Kind + " " + ref.Name
	}
	return &problem{shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, fmt.Sprintf(
		"the policy of node %s would be %s, which exists and belongs to %s: delete or rename it, or rename this pooled policy", node, name, owner)}
}

// selectsOthers says which other Nodes the nodeSelector of node's
// generated policy selects (a kubernetes.io/hostname label two Nodes
// carry), or nil when it selects no other. kubernetes-nmstate's handler on
// each of them would apply node's literal addresses.
func selectsOthers(w *world, node string, g *nmstatev1.NodeNetworkConfigurationPolicy) *problem {
	sel := labels.SelectorFromSet(g.Spec.NodeSelector)
	// Only Nodes of its hostname, which it selects by (generate); every
	// Node if it ever does not.
	var candidates []string
	if hostname, ok := g.Spec.NodeSelector[hostnameLabel]; ok {
		candidates = w.withHostname(hostname)
	} else {
		candidates = slices.Collect(maps.Keys(w.nodes))
	}
	var others []string
	for _, name := range candidates {
		if name != node && sel.Matches(labels.Set(w.nodes[name].Labels)) {
			others = append(others, name)
		}
	}
	if len(others) == 0 {
		return nil
	}
	slices.Sort(others)
	return &problem{shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, fmt.Sprintf(
		"the policy of node %s selects it by %s, which Node %s carries too: kubernetes-nmstate's handler would put node %s's "+
			"addresses on both; give each Node its own %s label (the kubelet sets it to the node's hostname), and node %s's policy is written then",
		node, sel, strings.Join(others, ", "), node, hostnameLabel, node)}
}

// withHostname returns the Nodes whose kubernetes.io/hostname label is
// value: the only ones a generated policy, which selects by that label
// (generate), can select. The index is built once a pass: a pass looks
// at every node, and a scan of every Node for each would make it grow
// with the square of the nodes.
func (w *world) withHostname(value string) []string {
	if w.byHostname == nil {
		w.byHostname = make(map[string][]string, len(w.nodes))
		for name, n := range w.nodes {
			if h, ok := n.Labels[hostnameLabel]; ok {
				w.byHostname[h] = append(w.byHostname[h], name)
			}
		}
	}
	return w.byHostname[value]
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// enactmentOf returns kubernetes-nmstate's enactment of node's generated
// NNCP, or nil.
func (w *world) enactmentOf(node string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	g := w.generated[node]
	if g == nil {
		return nil
	}
	e := w.enactments[shared.EnactmentKey(node, g.Name).Name]
	if e != nil && outdated(e, g) {
		return nil // still says what it did for an earlier policy of the name
	}
	return e
}

// outdated reports whether an enactment's state was set before its policy
// was created: kubernetes-nmstate's handler that was down when a policy
// was deleted keeps its enactment, and a policy created again under the
// same name starts again at generation 1 (clearEarlier deletes such an
// enactment before the create, and the world ignores it while the cache
// still shows it; this catches one written before the policy's creation
// that was not cleared). Both times are the API server's: the
// enactment's last status write as its managedFields record it. The
// times of its conditions are its node's clock, which may be off by any
// amount: a node an hour behind would show every state it sets as older
// than its policy, and never finish. Only an enactment whose
// managedFields say nothing falls back to them.
func outdated(e *nncev1beta1.NodeNetworkConfigurationEnactment, g *metav1.PartialObjectMetadata) bool {
	if at, ok := statusWrittenAt(e); ok {
		return at.Before(g.CreationTimestamp.Time)
	}
	for _, c := range e.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Before(&g.CreationTimestamp)
		}
	}
	return false
}

// statusWrittenAt returns when the enactment's status was last written,
// by the API server's clock (the latest managedFields entry that owns
// status fields), and whether any entry says.
func statusWrittenAt(e *nncev1beta1.NodeNetworkConfigurationEnactment) (time.Time, bool) {
	var at time.Time
	var ok bool
	for _, mf := range e.ManagedFields {
		if mf.Time == nil || mf.Subresource != "status" && !ownsStatus(mf.FieldsV1) {
			continue
		}
		if !ok || mf.Time.After(at) {
			at, ok = mf.Time.Time, true
		}
	}
	return at, ok
}

// ownsStatus reports whether a managedFields entry's field set has the
// top-level status field: an `f:status` nested deeper (a field of that
// name inside the spec) is not the object's status.
func ownsStatus(fields *metav1.FieldsV1) bool {
	if fields == nil {
		return false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(fields.Raw, &top); err != nil {
		return false
	}
	_, ok := top["f:status"]
	return ok
}

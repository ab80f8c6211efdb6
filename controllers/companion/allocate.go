package companion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// need is one capture of one node without an address.
type need struct {
	node string
	ref  capture.Ref
}

// problem is why some nodes have no address, or cannot be configured.
type problem struct {
	reason  shared.ConditionReason
	message string
}

// rank orders problems: a wait for a node's state after every other.
func (p problem) rank() int {
	if p.reason == ippoolv1.ReasonNodeStateUnknown {
		return 1
	}
	return 0
}

// allocate takes an address for every capture of every selected node that
// has none (not while its release is under way), one pool write per pool,
// and records them in next. What cannot be had is a problem, not an
// error.
func (r *Reconciler) allocate(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) ([]problem, error) {
	byPool := map[string][]need{}
	for _, node := range w.selected {
		rec := next.Status.NodeOf(node)
		if rec != nil && rec.Releasing {
			continue
		}
		for _, ref := range w.captures.Refs {
			if rec == nil || !slices.ContainsFunc(rec.Addresses, func(a ippoolv1.PooledAddress) bool { return a.Capture == ref.Capture }) {
				byPool[ref.Pool] = append(byPool[ref.Pool], need{node: node, ref: ref})
			}
		}
	}
	var problems []problem
	var notes []string
	for _, name := range slices.Sorted(maps.Keys(byPool)) {
		needs := byPool[name]
		pool := w.pools[name]
		if pool == nil {
			problems = append(problems, problem{ippoolv1.ReasonIPPoolNotFound, fmt.Sprintf(
				"NodeIPPool %s does not exist (capture %s): create it, or correct the capture ('kubectl get nodeippools'); %s wait",
				name, needs[0].ref.Capture, nodesOf(needs))})
			continue
		}
		if why := poolstatus.Unservable(pool); why != "" {
			problems = append(problems, problem{ippoolv1.ReasonIPPoolNotAvailable, why + "; " + nodesOf(needs) + " wait"})
			continue
		}
		if err := unrenderable(w, pool); err != nil {
			// A policy that can never render must not hold the pool's addresses.
			problems = append(problems, problem{ippoolv1.ReasonInvalidCapture, err.Error()})
			continue
		}
		got, refused, n, err := r.take(ctx, w, next, pool, needs)
		if err != nil {
			return nil, err
		}
		notes = append(notes, n...)
		for nd, ip := range got {
			record(w, next, nd, ip)
		}
		problems = append(problems, refused...)
	}
	if len(notes) > 0 {
		r.Recorder.Eventf(w.policy, nil, corev1.EventTypeNormal, ippoolv1.ReasonAddressesAllocated, "Allocate",
			"%s", strings.Join(notes, "; "))
	}
	// Waiting for a state comes last, whatever the pool: the first
	// problem names the condition's reason, and a lasting one (an
	// exhausted pool) is the one to show.
	slices.SortStableFunc(problems, func(a, b problem) int { return cmp.Compare(a.rank(), b.rank()) })
	return problems, nil
}

// unrenderable says why the template can never render with pool's
// addresses (it reads a gateway or DNS setting the pool does not set), or
// nil.
func unrenderable(w *world, pool *ippoolv1.NodeIPPool) error {
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return fmt.Errorf("NodeIPPool %s has an unusable range: %w", pool.Name, err)
	}
	sample := poolstatus.Address(pool, rng, rng.Start())
	return capture.Missing(capture.Needs(w.policy.Spec.DesiredState.Raw, w.captures.RefsOf(pool.Name)), pool.Name, sample)
}

// record adds ip, the address of nd, to next's records.
func record(w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy, nd need, ip netip.Addr) {
	rec := next.Status.NodeOf(nd.node)
	if rec == nil {
		next.Status.Nodes = append(next.Status.Nodes, ippoolv1.PooledPolicyNode{Node: nd.node,
			Policy: ippoolv1.NodePolicyName(w.policy.Name, nd.node)})
		slices.SortFunc(next.Status.Nodes, func(a, b ippoolv1.PooledPolicyNode) int { return strings.Compare(a.Node, b.Node) })
		rec = next.Status.NodeOf(nd.node)
	}
	if n := w.nodes[nd.node]; n != nil {
		rec.NodeUID = n.UID
	}
	rec.Addresses = append(rec.Addresses, ippoolv1.PooledAddress{Capture: nd.ref.Capture, Pool: nd.ref.Pool, IP: ip.String()})
	slices.SortFunc(rec.Addresses, func(a, b ippoolv1.PooledAddress) int { return strings.Compare(a.Capture, b.Capture) })
}

// take takes the addresses of needs from pool (takeFrom), but for the
// nodes whose state is not known yet (unknownState), which wait. It
// returns what it got, the problems of those it could not serve, and
// notes for the Event.
func (r *Reconciler) take(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy,
	pool *ippoolv1.NodeIPPool, needs []need) (map[need]netip.Addr, []problem, []string, error) {
	carried, err := r.carried(ctx, w, pool, needs)
	if err != nil {
		return nil, nil, nil, err
	}
	needs, unknown := unknownState(needs, carried)
	var got map[need]netip.Addr
	var problems []problem
	var said []string
	if len(needs) > 0 {
		if got, problems, said, err = r.takeFrom(ctx, w, next, pool, needs, carried); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(unknown) > 0 {
		nodes := make([]string, 0, len(unknown))
		for _, nd := range unknown {
			w.waitingForState[nd.node] = true
			nodes = append(nodes, nd.node)
		}
		empty := r.renewStateless(ctx, w, nodes)
		problems = append(problems, problem{ippoolv1.ReasonNodeStateUnknown, waitMessage(unknown, empty, pool.Name, r.statelessGrace(), r.RenewStates)})
	}
	return got, problems, said, nil
}

// takeFrom takes the addresses of needs from pool in one pool write, each
// held by an in-flight entry naming its node's holder with the policy's
// resourceVersion as token (holderOf); a need whose holder has such an entry already (a pass
// that died before its status write) takes that address again. It returns
// what it got, the problem of those it could not serve, and notes for the
// Event.
func (r *Reconciler) takeFrom(ctx context.Context, w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy,
	pool *ippoolv1.NodeIPPool, needs []need, carried assign.Carrying) (map[need]netip.Addr, []problem, []string, error) {
	var t taking
	ctx = audit.WithReason(ctx, "Served", holder.PooledPolicyKind+" "+next.Name+" selects the node")
	_, err := r.Pools.Update(ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		t = taking{got: map[need]netip.Addr{}}
		return r.takeIn(w, next, p, alloc, needs, carried, &t), nil
	}, poolwrite.Incarnation(pool.UID))
	switch {
	case poolwrite.Gone(err):
		return nil, []problem{{ippoolv1.ReasonIPPoolNotAvailable, fmt.Sprintf(
			"NodeIPPool %s was deleted or re-created meanwhile; %s wait", pool.Name, nodesOf(needs))}}, nil, nil
	case err != nil:
		return nil, nil, nil, fmt.Errorf("allocate from NodeIPPool %s for %s %s: %w", pool.Name, holder.PooledPolicyKind, w.policy.Name, err)
	}
	w.took(pool, t.got)
	var said []string
	for _, n := range t.notes.Events(pool.Name) {
		said = append(said, n.Message)
	}
	if len(t.got) > 0 {
		said = append(said, fmt.Sprintf("%d addresses of NodeIPPool %s for %s", len(t.got), pool.Name, nodesOf(slices.Collect(maps.Keys(t.got)))))
	}
	for _, nd := range t.full {
		w.full[nd.node] = append(w.full[nd.node], pool.Name)
	}
	switch {
	case len(t.full) > 0:
		return t.got, []problem{{ippoolv1.ReasonIPPoolExhausted, fmt.Sprintf(
			"NodeIPPool %s has no address left for %s (%d of %d allocated%s): they get one as soon as one is freed; grow the pool's range "+
				"(spec.range.end, or fewer excludes), or free addresses ('kubectl nodeippool show %s')",
			pool.Name, nodesOf(t.full), pool.Status.Allocated, pool.Status.Size, t.whyMore(), pool.Name)}}, said, nil
	case t.unavailable != "":
		return t.got, []problem{{ippoolv1.ReasonIPPoolNotAvailable, t.unavailable}}, said, nil
	}
	return t.got, nil, said, nil
}

// whyMore says, after "n of m allocated", which free addresses the
// chooser could not hand out (reserved for other nodes, carried by other
// nodes' networks), or "".
func (t *taking) whyMore() string {
	if t.fullWhy == nil || t.fullWhy.More() == "" {
		return ""
	}
	return "; " + t.fullWhy.More()
}

// unknownState splits off the needs of the nodes whose state is not
// known: a node that has published no NodeNetworkState may carry
// addresses all the same (its handler has not published yet after a
// restart, or after a restore that brought the Node back without its
// state; its machine is down through a restore), and serving it now
// would give it a new address over the one it carries, and leave the one
// it carries to be given to another node while it is down. A node that
// never ran waits too: it cannot apply anything before its handler runs.
func unknownState(needs []need, carried assign.Carrying) (known, unknown []need) {
	for _, nd := range needs {
		if _, published := carried.ByNode[nd.node]; !published {
			unknown = append(unknown, nd)
			continue
		}
		known = append(known, nd)
	}
	return known, unknown
}

// taking is what one pool write took.
type taking struct {
	got  map[need]netip.Addr
	full []need
	// fullWhy is the chooser's word on the last need it found no address
	// for: the free addresses it could not have.
	fullWhy     *assign.FullError
	unavailable string
	notes       assign.Notes
}

// takeIn is the mutation of take's pool write: each node's needs are one
// ask (assign.Chooser.Serve), which resumes the addresses its holder's
// in-flight entries hold under its token, or takes them all by the
// pool's rules; it reports whether it changed the pool. It reads nothing
// but its arguments.
func (r *Reconciler) takeIn(w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy, p *ippoolv1.NodeIPPool,
	alloc *ippool.Allocator, needs []need, carried assign.Carrying, t *taking) bool {
	changed := false
	ch := assign.New(p, alloc)
	defer ch.Done()
	ch.Avoid(carried.Carriers)
	since := metav1.NewTime(r.Clock.Now().Truncate(1e9))
	for _, group := range byNode(needs) {
		node := group[0].node
		h, token := holderOf(w.policy, node)
		cl := carried.Adopting(assign.Asker{Holder: h, Node: node, Policy: w.policy.Name, Labels: w.labelsOf(node),
			Holds: holds(next, node)}, func(captureName string) []string {
			return capture.Interfaces(w.policy.Spec.DesiredState.Raw, captureName)
		})
		captures := make([]string, len(group))
		for i, nd := range group {
			captures[i] = nd.ref.Capture
		}
		s, err := ch.Serve(assign.Ask{Asker: cl, Captures: captures, Token: token}, since)
		var refused *assign.Unservable
		switch {
		case errors.As(err, &refused):
			t.unavailable = refused.Why // the cache said it could serve; a rebuild began meanwhile
		case err != nil:
			t.full = append(t.full, group...)
			errors.As(err, &t.fullWhy)
		}
		for i, ip := range s.Resumed {
			t.got[group[i]] = ip
		}
		for i, taken := range s.Taken {
			t.notes.Add(taken, captures[i])
			t.got[group[i]], changed = taken.IP, true
		}
	}
	return changed
}

// byNode splits needs, which come node by node, into the needs of each
// node.
func byNode(needs []need) [][]need {
	var out [][]need
	for i, nd := range needs {
		if i == 0 || needs[i-1].node != nd.node {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], nd)
	}
	return out
}

// labelsOf returns the labels of node, for reservations by selector.
func (w *world) labelsOf(node string) func() map[string]string {
	return func() map[string]string {
		if n := w.nodes[node]; n != nil {
			return n.Labels
		}
		return nil
	}
}

// holds returns whether the node's record holds ip already.
func holds(next *ippoolv1.PooledNodeNetworkConfigurationPolicy, node string) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		rec := next.Status.NodeOf(node)
		return rec != nil && slices.ContainsFunc(rec.Addresses, func(a ippoolv1.PooledAddress) bool { return a.IP == ip.String() })
	}
}

// carried reads what the nodes that need addresses carry, for adoption
// (lifecycle.ReadCarrying, from the API server): a node that already
// carries an address of the pool on the interface the template puts its
// capture's address on (a per-node NNCP's static address) keeps it, unless
// another node carries it too; an address another pooled policy records
// for the node is the node's already, and so is one this policy's record
// (next) holds. Without the states no node would
// keep what it carries: an error, not a silent renumbering.
func (r *Reconciler) carried(ctx context.Context, w *world, pool *ippoolv1.NodeIPPool, needs []need) (assign.Carrying, error) {
	records, err := holder.List(ctx, r.Client, nil, holder.Sources{PooledPolicies: true})
	if err != nil {
		return assign.Carrying{}, err
	}
	// This policy's own records come from next (holds), never from the
	// cache: a stale copy would hide its own in-flight entries from it.
	records = slices.DeleteFunc(records, func(rec holder.Record) bool {
		return rec.Holder.Kind == holder.PolicyNode && rec.Holder.Name == w.policy.Name
	})
	nodes := make([]string, 0, len(needs))
	for _, nd := range needs {
		nodes = append(nodes, nd.node)
	}
	c, err := lifecycle.ReadCarrying(ctx, r.APIReader, pool, nodes, records)
	if err != nil {
		return c, err
	}
	return r.Carried.Complete(ctx, r.APIReader, c)
}

// nodesOf names the nodes of needs, for messages.
func nodesOf(needs []need) string {
	var names []string
	for _, nd := range needs {
		names = append(names, nd.node)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 1 {
		return "node " + names[0]
	}
	if len(names) > 10 {
		return fmt.Sprintf("nodes %s and %d more", strings.Join(names[:10], ", "), len(names)-10)
	}
	return "nodes " + strings.Join(names, ", ")
}

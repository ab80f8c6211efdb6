package companion

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
)

// statelessGrace is how long, by default (Reconciler.StatelessGrace), a
// NodeNetworkState may be seen holding nothing before it is deleted for
// its handler to create it again (renewStateless). A handler creates the
// object and writes its state right after, within a second.
// kubernetes-nmstate's handler, whose create went through but whose state
// write did not (the API server failed in between), writes the state only
// once the node's network changes, for it remembers the state it last
// wrote: it would never publish. It creates the object again, with its
// state, when it sees it deleted.
const statelessGrace = 30 * time.Second

// statelessSeen remembers, by NodeNetworkState UID, since when this
// process has seen each state that holds nothing, measured on the
// reconciler's clock (never against the API server's timestamps).
type statelessSeen struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
}

// seen records that the state of uid held nothing as of now and returns
// since when it has been seen so. An entry first seen more than
// forgetAfter ago is dropped when another is seen: its object has most
// likely been deleted or got its state, and if not, its grace starts
// again.
func (s *statelessSeen) seen(uid types.UID, now time.Time, forgetAfter time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since == nil {
		s.since = map[types.UID]time.Time{}
	}
	for u, at := range s.since {
		if u != uid && now.Sub(at) > forgetAfter {
			delete(s.since, u)
		}
	}
	at, found := s.since[uid]
	if !found {
		at = now
		s.since[uid] = at
	}
	return at
}

// forget drops the state of uid, deleted.
func (s *statelessSeen) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, uid)
}

// holdsNothing reports whether a NodeNetworkState's status is empty: the
// object as a handler creates it, before its first status write. One
// that holds only a condition (our handler's failed read of the node's
// network) says why it holds no state, and is left alone.
func holdsNothing(nns *nncev1beta1.NodeNetworkState) bool {
	st := nns.Status
	return len(st.CurrentState.Raw) == 0 && st.LastSuccessfulUpdateTime.IsZero() && len(st.Conditions) == 0 &&
		st.HandlerNmstateVersion == "" && st.HostNetworkManagerVersion == "" && st.HandlerNetworkManagerVersion == ""
}

// renewStateless reads, once per pass, the NodeNetworkStates of those of
// nodes (which wait for their state) it has not read yet, and, where
// RenewStates is set, deletes each that has held nothing for the grace
// period (the very object seen so: UID and resourceVersion
// preconditions), for its handler to create it again with its state. It
// returns the nodes of nodes whose state exists and holds nothing, for
// the message of their wait. A node whose state it deleted starts its
// wait afresh: looked at again soon. A failed read is logged and left to
// the next pass, a failed delete said in an Event too; the nodes wait all
// the same.
func (r *Reconciler) renewStateless(ctx context.Context, w *world, nodes []string) (empty []string) {
	if w.emptyStates == nil {
		w.emptyStates = map[string]bool{}
	}
	var unread []string
	for _, n := range nodes {
		if _, read := w.emptyStates[n]; !read {
			unread = append(unread, n)
		}
	}
	if len(unread) > 0 {
		r.readStateless(ctx, w, unread)
	}
	for _, n := range slices.Sorted(slices.Values(nodes)) {
		if w.emptyStates[n] {
			empty = append(empty, n)
		}
	}
	return slices.Compact(empty)
}

// readStateless reads the states of nodes into w.emptyStates and deletes
// those due (renewStateless).
func (r *Reconciler) readStateless(ctx context.Context, w *world, nodes []string) {
	log := ctrl.LoggerFrom(ctx)
	states, err := lifecycle.ReadStates(ctx, r.APIReader, nodes, lifecycle.ListStatesFrom)
	if err != nil {
		log.Error(err, "read the states of the nodes that wait for one")
		return
	}
	for _, n := range nodes {
		w.emptyStates[n] = false
	}
	now, grace := r.Clock.Now(), r.statelessGrace()
	for _, node := range slices.Sorted(maps.Keys(states.ByNode)) {
		nns := states.ByNode[node]
		if !holdsNothing(nns) {
			continue
		}
		w.emptyStates[node] = true
		if !r.RenewStates || now.Sub(r.stateless.seen(nns.UID, now, 10*grace)) < grace {
			continue
		}
		err := r.Client.Delete(ctx, nns, client.Preconditions{UID: &nns.UID, ResourceVersion: &nns.ResourceVersion})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			continue // gone or written meanwhile: read again next pass
		case err != nil:
			log.Error(err, "delete a NodeNetworkState that holds nothing", "node", node)
			r.Recorder.Eventf(w.policy, nns, corev1.EventTypeWarning, ippoolv1.ReasonNodeStateRenewed, "Renew",
				"could not delete the NodeNetworkState of node %s, which has held nothing for %s, for its handler to publish it again: %v", node, grace, err)
			continue
		}
		r.stateless.forget(nns.UID)
		r.stateWaits.restart(w.policy.Name, node)
		log.Info("deleted a NodeNetworkState that held nothing", "node", node, "uid", nns.UID)
		r.Recorder.Eventf(w.policy, nns, corev1.EventTypeWarning, ippoolv1.ReasonNodeStateRenewed, "Renew",
			"deleted the NodeNetworkState of node %s, which held nothing for %s: its handler creates it again with its state "+
				"(kubernetes-nmstate's handler writes a state only once the node's network changes when its first write failed)", node, grace)
	}
}

// statelessGrace is StatelessGrace, or the default where it is unset.
func (r *Reconciler) statelessGrace() time.Duration {
	if r.StatelessGrace > 0 {
		return r.StatelessGrace
	}
	return statelessGrace
}

// waitMessage says why nodes wait for their state: empty are those whose
// NodeNetworkState exists and holds nothing, the rest published none.
func waitMessage(unknown []need, empty []string, pool string, grace time.Duration, renew bool) string {
	var none []need
	for _, nd := range unknown {
		if !slices.Contains(empty, nd.node) {
			none = append(none, nd)
		}
	}
	var parts []string
	if len(none) > 0 {
		parts = append(parts, nodesOf(none)+" published no NodeNetworkState yet")
	}
	if len(empty) > 0 {
		part := "the NodeNetworkState of " + nodesOf(needsOf(empty)) + " holds no state"
		if len(empty) > 1 {
			part = "the NodeNetworkStates of " + nodesOf(needsOf(empty)) + " hold no state"
		}
		if renew {
			part += fmt.Sprintf(" (deleted once it has held nothing for %s, for the handler to publish it again)", grace)
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("%s: an address of NodeIPPool %s given now could replace one carried there; "+
		"served once the node's handler publishes its state (is it running there?)", strings.Join(parts, "; "), pool)
}

// needsOf makes needs of node names, for nodesOf.
func needsOf(nodes []string) []need {
	out := make([]need, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, need{node: n})
	}
	return out
}

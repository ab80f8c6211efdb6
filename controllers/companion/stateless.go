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
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
)

// statelessGrace is how long, by default (Reconciler.StatelessGrace), a
// NodeNetworkState may be seen without a state before it is deleted for
// its handler to create it again (renewStateless). A handler creates the object and writes its state
// right after, within a second; kubernetes-nmstate's handler, whose
// create went through but whose state write did not (the API server
// failed in between), writes the state only when the node's network
// changes, for it remembers the state it last wrote: it would never
// publish. It creates the object again, with its state, when it sees it
// deleted.
const statelessGrace = 30 * time.Second

// statelessSeen remembers, by NodeNetworkState UID, since when this
// process has seen each state that holds none, measured on the
// reconciler's clock (never against the API server's timestamps).
// Entries older than forgetAfter are dropped: their objects have been
// deleted or got their state.
type statelessSeen struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
}

// seen records that the state of uid held none as of now and returns
// since when it has been seen so.
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

// renewStateless reads the NodeNetworkStates of nodes, which wait for
// their state, and deletes each that has held no state for statelessGrace
// (the very object seen so: UID and resourceVersion preconditions), for
// its handler to create it again with its state. It returns the nodes
// whose state exists without one, for the message of their wait. A node whose state it deleted starts its wait
// afresh: looked at again soon. A failed read or delete is logged and
// left to the next pass; the nodes wait all the same.
func (r *Reconciler) renewStateless(ctx context.Context, w *world, nodes []string) (empty []string) {
	log := ctrl.LoggerFrom(ctx)
	states, err := lifecycle.ReadStates(ctx, r.APIReader, nodes, lifecycle.ListStatesFrom)
	if err != nil {
		log.Error(err, "read the states of the nodes that wait for one")
		return nil
	}
	now, grace := r.Clock.Now(), r.statelessGrace()
	for _, node := range slices.Sorted(maps.Keys(states.ByNode)) {
		nns := states.ByNode[node]
		if lifecycle.Published(nns) {
			continue // published since the first read: served next pass
		}
		empty = append(empty, node)
		if now.Sub(r.stateless.seen(nns.UID, now, 10*grace)) < grace {
			continue
		}
		err := r.Client.Delete(ctx, nns, client.Preconditions{UID: &nns.UID, ResourceVersion: &nns.ResourceVersion})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			continue // gone or written meanwhile: seen again next pass
		case err != nil:
			log.Error(err, "delete a NodeNetworkState that holds no state", "node", node)
			continue
		}
		r.stateless.forget(nns.UID)
		r.stateWaits.restart(w.policy.Name, node)
		msg := fmt.Sprintf("deleted the NodeNetworkState of node %s, which held no state for %s: its handler creates it again with its state "+
			"(kubernetes-nmstate's handler writes a state only when the node's network changes once its first write failed)", node, grace)
		log.Info("deleted a NodeNetworkState that held no state", "node", node, "uid", nns.UID)
		r.Recorder.Eventf(w.policy, nil, corev1.EventTypeWarning, ippoolv1.ReasonNodeStateRenewed, "Renew", "%s", msg)
	}
	return empty
}

// statelessGrace is StatelessGrace, or the default where it is unset.
func (r *Reconciler) statelessGrace() time.Duration {
	if r.StatelessGrace > 0 {
		return r.StatelessGrace
	}
	return statelessGrace
}

// waitMessage says why nodes wait for their state: empty are those whose
// NodeNetworkState exists without a state, the rest published none.
func waitMessage(unknown []need, empty []string, pool string, grace time.Duration) string {
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
		parts = append(parts, fmt.Sprintf("the NodeNetworkState of %s holds no state (deleted after %s without one, for its handler to publish it again)",
			nodesOf(needsOf(empty)), grace))
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

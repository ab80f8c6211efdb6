package companion

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// progressPoll is how often a pooled policy whose rollout is not done is
// looked at again, besides the events of its NNCPs and enactments.
const progressPoll = 30 * time.Second

// statePoll is how soon a pooled policy with a node that waits for its
// first NodeNetworkState is looked at again, for the first stateWait of
// that node's wait: its handler publishes the state within seconds of
// starting, and the states are not watched (their writes are many, and
// each would reconcile every pooled policy). A wait that lasts longer
// (no handler runs there, the machine is down) is looked at every
// progressPoll.
const statePoll, stateWait = 2 * time.Second, time.Minute

// lookAgain says how soon a pass that is not done looks again: soon while
// a node has waited less than stateWait for its state (newestWait is
// when the latest such wait began, zero when none), when a failed removal
// is due to be written again, or at the next poll while the rollout waits
// or progresses or something is wrong; 0 when all is done.
func lookAgain(w *world, pl plan, problems []problem, newestWait, now time.Time) time.Duration {
	switch {
	case !newestWait.IsZero() && now.Sub(newestWait) < stateWait && (w.retryIn == 0 || w.retryIn > statePoll):
		return statePoll
	case w.retryIn > 0 && w.retryIn < progressPoll:
		return w.retryIn
	case pl.waiting > 0 || pl.progressing > 0 || len(problems) > 0:
		return progressPoll
	}
	return 0
}

// nextLook notes which nodes of the pass wait for their state, and says
// how soon to look again (lookAgain).
func (r *Reconciler) nextLook(w *world, pl plan, problems []problem) time.Duration {
	now := r.Clock.Now()
	return lookAgain(w, pl, problems, r.stateWaits.note(w.policy.Name, w.policy.UID, w.waitingForState, now), now)
}

// stateWaits remembers, by pooled policy and node, since when a node has
// waited for its first NodeNetworkState. It is kept in memory: a
// restarted controller starts every wait afresh, which only makes it look
// again soon for another stateWait.
type stateWaits struct {
	mu    sync.Mutex
	since map[string]policyWaits
}

// policyWaits are the waits of one incarnation of a pooled policy: when
// each node began to wait.
type policyWaits struct {
	uid   types.UID
	nodes map[string]time.Time
}

// note records that, as of now, exactly the nodes in waiting wait for
// their state in policy, of uid (a node that no longer waits is
// forgotten, one that starts waiting is stamped now, and a policy
// re-created under the name starts afresh), and returns since when the
// newest of them has waited: zero when none waits.
func (s *stateWaits) note(policy string, uid types.UID, waiting map[string]bool, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(waiting) == 0 {
		delete(s.since, policy)
		return time.Time{}
	}
	var before map[string]time.Time
	if w, found := s.since[policy]; found && w.uid == uid {
		before = w.nodes
	}
	kept := make(map[string]time.Time, len(waiting))
	var newest time.Time
	for node := range waiting {
		since, found := before[node]
		if !found {
			since = now
		}
		kept[node] = since
		if since.After(newest) {
			newest = since
		}
	}
	if s.since == nil {
		s.since = map[string]policyWaits{}
	}
	s.since[policy] = policyWaits{uid: uid, nodes: kept}
	return newest
}

// restart makes node's wait in policy begin anew at the next note: its
// NodeNetworkState was deleted for its handler to publish it again, which
// it does within seconds.
func (s *stateWaits) restart(policy, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, found := s.since[policy]; found {
		delete(w.nodes, node)
	}
}

// forget drops the waits of a pooled policy deleted for good.
func (s *stateWaits) forget(policy string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, policy)
}

package companion

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// TestLookAgainWhileANodeWaitsForItsState: a pooled policy with a node
// that waits for its first NodeNetworkState looks again soon, for a
// minute of that node's wait, then at the rollout's pace (no handler runs
// there, or its machine is down); a removal due sooner still comes first.
func TestLookAgainWhileANodeWaitsForItsState(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	problems := []problem{{ippoolv1.ReasonNodeStateUnknown, "node n1 published no NodeNetworkState yet"}}
	waits := &world{waitingForState: map[string]bool{"n1": true}}
	for _, tc := range []struct {
		name    string
		w       *world
		since   time.Duration // how long the newest wait has lasted; < 0: none
		want    time.Duration
		problem []problem
	}{
		{"a wait just begun", waits, 0, statePoll, problems},
		{"a wait of 59 s", waits, 59 * time.Second, statePoll, problems},
		{"a wait of over a minute", waits, 61 * time.Second, progressPoll, problems},
		{"a removal due sooner", &world{retryIn: time.Second}, 0, time.Second, problems},
		{"no wait", &world{}, -1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var newest time.Time
			if tc.since >= 0 {
				newest = now.Add(-tc.since)
			}
			if got := lookAgain(tc.w, plan{}, tc.problem, newest, now); got != tc.want {
				t.Errorf("lookAgain = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStateWaitsTimeEachNode: the wait that sets the pace is each node's
// own, from when it began, whatever the policy's conditions say: a node
// that starts to wait in a policy that has waited long for another is
// looked at soon, and a node served is forgotten (its wait starts afresh
// if it waits again), as is a policy deleted, or re-created under its
// name.
func TestStateWaitsTimeEachNode(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var s stateWaits
	if got := s.note("p", "u1", map[string]bool{"n1": true}, t0); !got.Equal(t0) {
		t.Fatalf("n1's wait began %v, want %v", got, t0)
	}
	if got := s.note("p", "u1", map[string]bool{"n1": true}, t0.Add(2*time.Minute)); !got.Equal(t0) {
		t.Errorf("a wait still going keeps its start: got %v, want %v", got, t0)
	}
	later := t0.Add(3 * time.Minute)
	if got := s.note("p", "u1", map[string]bool{"n1": true, "n2": true}, later); !got.Equal(later) {
		t.Errorf("a node that starts to wait sets the pace: got %v, want %v", got, later)
	}
	if got := s.note("other", "u2", map[string]bool{"n1": true}, later.Add(time.Minute)); !got.Equal(later.Add(time.Minute)) {
		t.Errorf("another policy's wait is its own: got %v", got)
	}
	again := t0.Add(5 * time.Minute)
	if got := s.note("p", "u1", map[string]bool{"n1": true}, again); !got.Equal(t0) {
		t.Errorf("n2 served: the newest wait is n1's, from %v; got %v", t0, got)
	}
	if got := s.note("p", "u1", nil, again); !got.IsZero() {
		t.Errorf("no node waits: got %v, want zero", got)
	}
	if got := s.note("p", "u1", map[string]bool{"n1": true}, again.Add(time.Second)); !got.Equal(again.Add(time.Second)) {
		t.Errorf("a node that waits again starts afresh: got %v", got)
	}
	if got := s.note("p", "u3", map[string]bool{"n1": true}, again.Add(time.Minute)); !got.Equal(again.Add(time.Minute)) {
		t.Errorf("a policy re-created under the name starts afresh: got %v", got)
	}
	s.forget("p")
	if _, found := s.since["p"]; found {
		t.Error("a policy deleted for good is forgotten")
	}
}

// TestRenewedStateRestartsTheWait: a node whose empty state was deleted
// for its handler to publish again waits afresh (looked at soon), and the
// other nodes' waits keep their start.
func TestRenewedStateRestartsTheWait(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var s stateWaits
	s.note("p", "u1", map[string]bool{"n1": true, "n2": true}, t0)
	s.restart("p", "n1")
	s.restart("absent", "n1") // nothing to restart: no harm
	now := t0.Add(2 * time.Minute)
	if got := s.note("p", "u1", map[string]bool{"n1": true, "n2": true}, now); !got.Equal(now) {
		t.Errorf("n1's wait restarted: the newest is now, %v; got %v", now, got)
	}
	if got := s.since["p"].nodes["n2"]; !got.Equal(t0) {
		t.Errorf("n2's wait keeps its start %v; got %v", t0, got)
	}
}

// TestStatelessSeenOnce: a state seen without one keeps the time it was
// first seen so until it is forgotten; a stale entry of another object is
// dropped.
func TestStatelessSeenOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var s statelessSeen
	if got := s.seen("a", t0, time.Minute); !got.Equal(t0) {
		t.Fatalf("first seen %v, want %v", got, t0)
	}
	if got := s.seen("a", t0.Add(30*time.Second), time.Minute); !got.Equal(t0) {
		t.Errorf("seen again: keeps %v; got %v", t0, got)
	}
	later := t0.Add(2 * time.Minute)
	if got := s.seen("b", later, time.Minute); !got.Equal(later) {
		t.Errorf("another object: %v; got %v", later, got)
	}
	if _, found := s.since["a"]; found {
		t.Error("an entry older than forgetAfter is dropped")
	}
	s.forget("b")
	if got := s.seen("b", later.Add(time.Second), time.Minute); !got.Equal(later.Add(time.Second)) {
		t.Errorf("forgotten: seen afresh; got %v", got)
	}
}

// TestHoldsNothing: only a state whose status is empty, as a handler
// creates the object, is renewed; a condition, a version or a state
// says something.
func TestHoldsNothing(t *testing.T) {
	for _, c := range []struct {
		name   string
		status shared.NodeNetworkStateStatus
		want   bool
	}{
		{"empty", shared.NodeNetworkStateStatus{}, true},
		{"a state", shared.NodeNetworkStateStatus{CurrentState: shared.NewState("interfaces: []")}, false},
		{"a time", shared.NodeNetworkStateStatus{LastSuccessfulUpdateTime: metav1.Now()}, false},
		{"a condition", shared.NodeNetworkStateStatus{Conditions: shared.ConditionList{{Type: shared.NodeNetworkStateConditionFailing}}}, false},
		{"a version", shared.NodeNetworkStateStatus{HandlerNmstateVersion: "2.2"}, false},
	} {
		if got := holdsNothing(&nncev1beta1.NodeNetworkState{Status: c.status}); got != c.want {
			t.Errorf("%s: holdsNothing = %v, want %v", c.name, got, c.want)
		}
	}
}

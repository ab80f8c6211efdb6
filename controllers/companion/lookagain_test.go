package companion

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// TestLookAgainWhileANodeWaitsForItsState: a pooled policy with a node
// that waits for its first NodeNetworkState looks again soon, for a
// minute, then at the rollout's pace (no handler runs there, or its
// machine is down); a removal due sooner still comes first.
func TestLookAgainWhileANodeWaitsForItsState(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	waiting := func(since time.Duration) *ippoolv1.PooledNodeNetworkConfigurationPolicy {
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{}
		p.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationPolicyConditionDegraded,
			Status: corev1.ConditionTrue, Reason: ippoolv1.ReasonNodeStateUnknown, LastTransitionTime: metav1.NewTime(now.Add(-since))}}
		return p
	}
	problems := []problem{{ippoolv1.ReasonNodeStateUnknown, "node n1 published no NodeNetworkState yet"}}
	for _, tc := range []struct {
		name    string
		w       *world
		want    time.Duration
		problem []problem
	}{
		{"a wait just begun", &world{policy: waiting(0), waitsForState: true}, statePoll, problems},
		{"a wait of 59 s", &world{policy: waiting(59 * time.Second), waitsForState: true}, statePoll, problems},
		{"a wait of over a minute", &world{policy: waiting(61 * time.Second), waitsForState: true}, progressPoll, problems},
		{"a removal due sooner", &world{policy: waiting(0), waitsForState: true, retryIn: time.Second}, time.Second, problems},
		{"no wait", &world{policy: &ippoolv1.PooledNodeNetworkConfigurationPolicy{}}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lookAgain(tc.w, plan{}, tc.problem, now); got != tc.want {
				t.Errorf("lookAgain = %v, want %v", got, tc.want)
			}
		})
	}
}

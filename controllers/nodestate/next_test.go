package nodestate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
)

// TestNext: a state is written when it changes, never as a heartbeat;
// formatting does not count as a change; a failed read keeps the last state
// and says why.
func TestNext(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s shared.NodeNetworkStateStatus
	for i, tt := range []struct {
		state    string
		err      error
		changed  bool
		updated  time.Time
		trueType shared.ConditionType
		contains string
	}{
		{state: `{"interfaces":[{"name":"eth1","state":"up"}]}`, changed: true, updated: t0, trueType: shared.NodeNetworkStateConditionAvailable, contains: "eth1"},
		{state: "interfaces:\n- state: up\n  name: eth1\n", changed: false, updated: t0, trueType: shared.NodeNetworkStateConditionAvailable, contains: "eth1"},
		{state: `{"interfaces":[{"name":"eth1","state":"down"}]}`, changed: true, updated: t0.Add(2 * time.Minute), trueType: shared.NodeNetworkStateConditionAvailable, contains: "down"},
		{err: errors.New("NetworkManager is not running"), changed: true, updated: t0.Add(2 * time.Minute), trueType: shared.NodeNetworkStateConditionFailing, contains: "down"},
		{err: errors.New("NetworkManager is not running"), changed: false, updated: t0.Add(2 * time.Minute), trueType: shared.NodeNetworkStateConditionFailing, contains: "down"},
		// Recovered: a successful update, though the state is the same.
		{state: `{"interfaces":[{"name":"eth1","state":"down"}]}`, changed: true, updated: t0.Add(5 * time.Minute), trueType: shared.NodeNetworkStateConditionAvailable, contains: "down"},
		{state: "not: [a state", changed: true, updated: t0.Add(5 * time.Minute), trueType: shared.NodeNetworkStateConditionFailing, contains: "down"},
	} {
		now := t0.Add(time.Duration(i) * time.Minute)
		got, changed := next(s, []byte(tt.state), tt.err, now)
		if changed != tt.changed || !got.LastSuccessfulUpdateTime.Time.Equal(tt.updated) {
			t.Errorf("step %d: changed %v updated %s; want %v %s", i, changed, got.LastSuccessfulUpdateTime.Time, tt.changed, tt.updated)
		}
		c := got.Conditions.Find(tt.trueType)
		if c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("step %d: %s is not True: %+v", i, tt.trueType, got.Conditions)
		}
		if !contains(string(got.CurrentState.Raw), tt.contains) {
			t.Errorf("step %d: state %q lacks %q", i, got.CurrentState.Raw, tt.contains)
		}
		if tt.err != nil && !contains(got.Conditions.Find(shared.NodeNetworkStateConditionFailing).Message, tt.err.Error()) {
			t.Errorf("step %d: the Failing message does not carry the error: %+v", i, got.Conditions)
		}
		s = got
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestJittered(t *testing.T) {
	for f, want := range map[float64]time.Duration{0: 54 * time.Second, 0.5: time.Minute, 0.999999: 66 * time.Second} {
		if got := jittered(time.Minute, f).Round(time.Second); got != want {
			t.Errorf("jittered(1m, %v) = %s, want %s", f, got, want)
		}
	}
}

package conditions

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
)

func TestOneTrue(t *testing.T) {
	types := []shared.ConditionType{"A", "B"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := OneTrue(nil, types, "A", "R", "m", t0)
	if len(first) != 2 || first[0].Status != corev1.ConditionTrue || first[1].Status != corev1.ConditionFalse {
		t.Fatalf("first: %+v", first)
	}
	same := OneTrue(first, types, "A", "R", "m", t0.Add(time.Hour))
	if !same[0].LastHeartbeatTime.Equal(&first[0].LastHeartbeatTime) || !Same(same, first) {
		t.Errorf("a repeated outcome moved times: %+v", same)
	}
	message := OneTrue(same, types, "A", "R", "other", t0.Add(2*time.Hour))
	if message[0].LastTransitionTime.Time != t0 || message[0].LastHeartbeatTime.Time != t0.Add(2*time.Hour) || Same(message, same) {
		t.Errorf("a new message: %+v", message)
	}
	flipped := OneTrue(message, types, "B", "S", "n", t0.Add(3*time.Hour))
	if flipped[0].LastTransitionTime.Time != t0.Add(3*time.Hour) || flipped[1].Status != corev1.ConditionTrue {
		t.Errorf("a flip: %+v", flipped)
	}
}

package handler

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
)

func TestWithConditionsMovesTimesOnlyOnChange(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := withConditions(nil, progressing("applying"), t0)
	if len(c) != len(shared.NodeNetworkConfigurationEnactmentConditionTypes) {
		t.Fatalf("%d conditions", len(c))
	}
	if p := c.Find(shared.NodeNetworkConfigurationEnactmentConditionProgressing); p.Status != corev1.ConditionTrue || p.Message != "applying" {
		t.Fatalf("progressing = %+v", p)
	}
	// The same outcome later changes nothing, not even the heartbeat.
	same := withConditions(c, progressing("applying"), t0.Add(time.Hour))
	for _, x := range same {
		if !x.LastHeartbeatTime.Time.Equal(t0) || !x.LastTransitionTime.Time.Equal(t0) {
			t.Fatalf("%s times moved on a repeated outcome: %+v", x.Type, x)
		}
	}
	// A flip moves the transition time of the types whose status changed
	// only: Progressing True to False, and Available and Failing, Unknown
	// while it progressed, to True and False.
	t1 := t0.Add(2 * time.Hour)
	flipped := withConditions(same, available("done"), t1)
	for _, x := range flipped {
		moved := x.LastTransitionTime.Time.Equal(t1)
		wantMoved := x.Type == shared.NodeNetworkConfigurationEnactmentConditionAvailable ||
			x.Type == shared.NodeNetworkConfigurationEnactmentConditionProgressing ||
			x.Type == shared.NodeNetworkConfigurationEnactmentConditionFailing
		if moved != wantMoved {
			t.Errorf("%s: transition moved=%v, want %v", x.Type, moved, wantMoved)
		}
	}
}

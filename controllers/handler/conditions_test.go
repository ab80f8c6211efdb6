package handler

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
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
	// A flip moves the transition time of the two types that flipped only.
	t1 := t0.Add(2 * time.Hour)
	flipped := withConditions(same, available("done"), t1)
	for _, x := range flipped {
		moved := x.LastTransitionTime.Time.Equal(t1)
		wantMoved := x.Type == shared.NodeNetworkConfigurationEnactmentConditionAvailable ||
			x.Type == shared.NodeNetworkConfigurationEnactmentConditionProgressing
		if moved != wantMoved {
			t.Errorf("%s: transition moved=%v, want %v", x.Type, moved, wantMoved)
		}
	}
}

func enactment(generation int64, state shared.ConditionType) nncev1beta1.NodeNetworkConfigurationEnactment {
	e := nncev1beta1.NodeNetworkConfigurationEnactment{}
	e.Status.PolicyGeneration = generation
	e.Status.Conditions = withConditions(nil, outcome{condition: state}, time.Now())
	return e
}

func TestPolicyConditions(t *testing.T) {
	const (
		av   = shared.NodeNetworkConfigurationEnactmentConditionAvailable
		fail = shared.NodeNetworkConfigurationEnactmentConditionFailing
		pend = shared.NodeNetworkConfigurationEnactmentConditionPending
	)
	tests := []struct {
		name       string
		matching   int
		enactments []nncev1beta1.NodeNetworkConfigurationEnactment
		trueType   shared.ConditionType
		message    string
	}{
		{"no node", 0, nil, shared.NodeNetworkConfigurationPolicyConditionAvailable, "Policy does not match any node"},
		{"all available", 2, []nncev1beta1.NodeNetworkConfigurationEnactment{enactment(3, av), enactment(3, av)},
			shared.NodeNetworkConfigurationPolicyConditionAvailable, "2/2 nodes successfully configured"},
		{"one failing wins", 3, []nncev1beta1.NodeNetworkConfigurationEnactment{enactment(3, av), enactment(3, fail), enactment(3, pend)},
			shared.NodeNetworkConfigurationPolicyConditionDegraded, "1/3 nodes failed to configure"},
		{"a node without enactment yet", 2, []nncev1beta1.NodeNetworkConfigurationEnactment{enactment(3, av)},
			shared.NodeNetworkConfigurationPolicyConditionProgressing, "Policy is progressing 1/2 nodes finished"},
		{"an enactment of an older generation", 1, []nncev1beta1.NodeNetworkConfigurationEnactment{enactment(2, av)},
			shared.NodeNetworkConfigurationPolicyConditionProgressing, "Policy is progressing 0/1 nodes finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := policyConditions(nil, summarize(tt.matching, 3, tt.enactments), time.Now())
			for _, x := range c {
				if (x.Status == corev1.ConditionTrue) != (x.Type == tt.trueType) {
					t.Errorf("%s is %s", x.Type, x.Status)
				}
			}
			if got := c.Find(tt.trueType).Message; got != tt.message {
				t.Errorf("message %q, want %q", got, tt.message)
			}
		})
	}
}

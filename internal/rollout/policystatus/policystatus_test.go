package policystatus

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
)

func enactment(generation int64, state shared.ConditionType) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e := nncev1beta1.NodeNetworkConfigurationEnactment{}
	e.Status.PolicyGeneration = generation
	e.Status.Conditions = conditions.OneTrue(nil, shared.NodeNetworkConfigurationEnactmentConditionTypes[:], state, "", "", time.Now())
	return &e
}

// retrying is an enactment of kubernetes-nmstate's handler between two
// attempts at generation: Failing and Progressing True, reason Retrying.
func retrying(generation int64) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e := enactment(generation, shared.NodeNetworkConfigurationEnactmentConditionFailing)
	for i := range e.Status.Conditions {
		if e.Status.Conditions[i].Type == shared.NodeNetworkConfigurationEnactmentConditionProgressing {
			e.Status.Conditions[i].Status = corev1.ConditionTrue
			e.Status.Conditions[i].Reason = "Retrying"
		}
	}
	return e
}

func TestConditions(t *testing.T) {
	const (
		av   = shared.NodeNetworkConfigurationEnactmentConditionAvailable
		fail = shared.NodeNetworkConfigurationEnactmentConditionFailing
		pend = shared.NodeNetworkConfigurationEnactmentConditionPending
	)
	tests := []struct {
		name       string
		matching   int
		enactments []*nncev1beta1.NodeNetworkConfigurationEnactment
		trueType   shared.ConditionType
		message    string
	}{
		{"no node", 0, nil, Ignored, "Policy does not match any node"},
		{"all available", 2, []*nncev1beta1.NodeNetworkConfigurationEnactment{enactment(3, av), enactment(3, av)},
			shared.NodeNetworkConfigurationPolicyConditionAvailable, "2/2 nodes successfully configured"},
		{"one failing wins", 3, []*nncev1beta1.NodeNetworkConfigurationEnactment{enactment(3, av), enactment(3, fail), enactment(3, pend)},
			shared.NodeNetworkConfigurationPolicyConditionDegraded, "1/3 nodes failed to configure"},
		{"a node without enactment yet", 2, []*nncev1beta1.NodeNetworkConfigurationEnactment{enactment(3, av)},
			shared.NodeNetworkConfigurationPolicyConditionProgressing, "Policy is progressing 1/2 nodes finished"},
		{"an enactment of an older generation", 1, []*nncev1beta1.NodeNetworkConfigurationEnactment{enactment(2, av)},
			shared.NodeNetworkConfigurationPolicyConditionProgressing, "Policy is progressing 0/1 nodes finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Conditions(nil, Summarize(tt.matching, 3, tt.enactments), time.Now())
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

func TestMaxUnavailable(t *testing.T) {
	pct, two, bad := intstr.FromString("30%"), intstr.FromInt32(2), intstr.FromString("lots")
	tests := []struct {
		spec     *intstr.IntOrString
		matching int
		want     int
	}{
		{nil, 10, 5}, {nil, 3, 2}, {nil, 0, 1}, {&pct, 10, 3}, {&pct, 1, 1}, {&two, 10, 2}, {&two, 1, 2},
	}
	for _, tt := range tests {
		got, err := MaxUnavailable(tt.spec, tt.matching)
		if err != nil || got != tt.want {
			t.Errorf("MaxUnavailable(%v, %d) = %d, %v; want %d", tt.spec, tt.matching, got, err, tt.want)
		}
	}
	if _, err := MaxUnavailable(&bad, 10); err == nil {
		t.Error("maxUnavailable accepted \"lots\"")
	}
}

func TestStateOf(t *testing.T) {
	const (
		av   = shared.NodeNetworkConfigurationEnactmentConditionAvailable
		fail = shared.NodeNetworkConfigurationEnactmentConditionFailing
		ab   = shared.NodeNetworkConfigurationEnactmentConditionAborted
		prog = shared.NodeNetworkConfigurationEnactmentConditionProgressing
	)
	tests := []struct {
		name string
		e    *nncev1beta1.NodeNetworkConfigurationEnactment
		want State
	}{
		{"no enactment", nil, Progressing},
		{"an older generation, Available", enactment(2, av), Progressing},
		{"Available", enactment(3, av), Available},
		{"Failing", enactment(3, fail), Failing},
		{"Aborted", enactment(3, ab), Aborted},
		{"Progressing", enactment(3, prog), Progressing},
		{"retrying: Failing and Progressing True", retrying(3), Progressing},
		{"aborted by the policy controller, not shown yet", abortedSlot(enactment(0, ""), 3), Aborted},
		{"its request aborted at an earlier generation", abortedSlot(enactment(3, prog), 2), Progressing},
	}
	for _, tt := range tests {
		if got := StateOf(tt.e, 3); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// abortedSlot has the policy controller refuse e's slot request at
// generation.
func abortedSlot(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e.Status.Slot = &nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: generation}}
	return e
}

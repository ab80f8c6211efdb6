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

// Enactment writes what kubernetes-nmstate's handler writes for each
// outcome (its pkg/enactmentstatus/conditions): the other conditions
// carry the True one's reason and no message, Aborted keeps
// SuccessfullyConfigured while the enactment fails, and Failing and
// Available are Unknown while it progresses.
func TestEnactment(t *testing.T) {
	const (
		available   = shared.NodeNetworkConfigurationEnactmentConditionAvailable
		failing     = shared.NodeNetworkConfigurationEnactmentConditionFailing
		progressing = shared.NodeNetworkConfigurationEnactmentConditionProgressing
		pending     = shared.NodeNetworkConfigurationEnactmentConditionPending
		aborted     = shared.NodeNetworkConfigurationEnactmentConditionAborted
	)
	type want struct {
		status corev1.ConditionStatus
		reason shared.ConditionReason
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		trueType shared.ConditionType
		reason   shared.ConditionReason
		want     map[shared.ConditionType]want
	}{
		{available, "SuccessfullyConfigured", map[shared.ConditionType]want{
			available: {"True", "SuccessfullyConfigured"}, failing: {"False", "SuccessfullyConfigured"},
			progressing: {"False", "SuccessfullyConfigured"}, pending: {"False", "SuccessfullyConfigured"},
			aborted: {"False", "SuccessfullyConfigured"}}},
		{failing, "FailedToConfigure", map[shared.ConditionType]want{
			available: {"False", "FailedToConfigure"}, failing: {"True", "FailedToConfigure"},
			progressing: {"False", "FailedToConfigure"}, pending: {"False", "FailedToConfigure"},
			aborted: {"False", "SuccessfullyConfigured"}}},
		{progressing, "ConfigurationProgressing", map[shared.ConditionType]want{
			available: {"Unknown", "ConfigurationProgressing"}, failing: {"Unknown", "ConfigurationProgressing"},
			progressing: {"True", "ConfigurationProgressing"}, pending: {"False", "ConfigurationProgressing"},
			aborted: {"False", "ConfigurationProgressing"}}},
		{pending, "MaxUnavailableLimitReached", map[shared.ConditionType]want{
			available: {"False", "MaxUnavailableLimitReached"}, failing: {"False", "MaxUnavailableLimitReached"},
			progressing: {"False", "MaxUnavailableLimitReached"}, pending: {"True", "MaxUnavailableLimitReached"},
			aborted: {"False", "MaxUnavailableLimitReached"}}},
		{aborted, "ConfigurationAborted", map[shared.ConditionType]want{
			available: {"False", "ConfigurationAborted"}, failing: {"False", "ConfigurationAborted"},
			progressing: {"False", "ConfigurationAborted"}, pending: {"False", "ConfigurationAborted"},
			aborted: {"True", "ConfigurationAborted"}}},
	} {
		got := Enactment(nil, tt.trueType, tt.reason, "the message", now)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %d conditions, want %d", tt.trueType, len(got), len(tt.want))
		}
		for _, c := range got {
			w := tt.want[c.Type]
			if c.Status != w.status || c.Reason != w.reason {
				t.Errorf("%s: %s is %s/%s, want %s/%s", tt.trueType, c.Type, c.Status, c.Reason, w.status, w.reason)
			}
			if wantMessage := c.Type == tt.trueType; (c.Message != "") != wantMessage {
				t.Errorf("%s: %s has message %q", tt.trueType, c.Type, c.Message)
			}
		}
	}
}

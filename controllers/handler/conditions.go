package handler

import (
	"fmt"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// outcome is the state an enactment is left in: which of its condition types
// is True, why, and when to look again.
type outcome struct {
	condition    shared.ConditionType
	reason       shared.ConditionReason
	message      string
	requeueAfter time.Duration
}

func available(message string) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionAvailable,
		reason: shared.NodeNetworkConfigurationEnactmentConditionSuccessfullyConfigured, message: message}
}

func progressing(message string) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionProgressing,
		reason: shared.NodeNetworkConfigurationEnactmentConditionConfigurationProgressing, message: message}
}

func failing(reason string, message string) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionFailing,
		reason: shared.ConditionReason(reason), message: message}
}

func pending(reason string, message string, after time.Duration) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionPending,
		reason: shared.ConditionReason(reason), message: message, requeueAfter: after}
}

// withConditions returns conditions with o's type True and every other
// enactment condition type False. Times move only when something changes:
// the transition time when a status flips, the heartbeat when status,
// reason or message change, so a repeated outcome writes nothing new.
func withConditions(conditions shared.ConditionList, o outcome, now time.Time) shared.ConditionList {
	ts := metav1.NewTime(now.Truncate(time.Second))
	out := make(shared.ConditionList, 0, len(shared.NodeNetworkConfigurationEnactmentConditionTypes))
	for _, t := range shared.NodeNetworkConfigurationEnactmentConditionTypes {
		want := shared.Condition{Type: t, Status: corev1.ConditionFalse}
		if t == o.condition {
			want = shared.Condition{Type: t, Status: corev1.ConditionTrue, Reason: o.reason, Message: o.message}
		}
		out = append(out, merged(conditions.Find(t), want, ts))
	}
	return out
}

func merged(old *shared.Condition, want shared.Condition, now metav1.Time) shared.Condition {
	if old == nil {
		want.LastTransitionTime, want.LastHeartbeatTime = now, now
		return want
	}
	want.LastTransitionTime, want.LastHeartbeatTime = old.LastTransitionTime, old.LastHeartbeatTime
	if old.Status != want.Status {
		want.LastTransitionTime = now
	}
	if old.Status != want.Status || old.Reason != want.Reason || old.Message != want.Message {
		want.LastHeartbeatTime = now
	}
	return want
}

// trueCondition returns the enactment's True condition type, or "".
func trueCondition(e *nncev1beta1.NodeNetworkConfigurationEnactment) shared.ConditionType {
	for _, c := range e.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

// policySummary counts a policy's enactments by state. Enactments of an
// older policy generation count as progressing.
type policySummary struct {
	matching, available, failing, progressing int
}

func summarize(matching int, generation int64, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) policySummary {
	s := policySummary{matching: matching}
	for i := range enactments {
		e := &enactments[i]
		switch {
		case e.Status.PolicyGeneration != generation:
			s.progressing++
		case trueCondition(e) == shared.NodeNetworkConfigurationEnactmentConditionAvailable:
			s.available++
		case trueCondition(e) == shared.NodeNetworkConfigurationEnactmentConditionFailing:
			s.failing++
		default:
			s.progressing++
		}
	}
	return s
}

// policyConditions computes the policy's Available, Degraded and
// Progressing conditions from a summary, as kubernetes-nmstate reports them.
func policyConditions(old shared.ConditionList, s policySummary, now time.Time) shared.ConditionList {
	ts := metav1.NewTime(now.Truncate(time.Second))
	set := func(t shared.ConditionType, status corev1.ConditionStatus, reason shared.ConditionReason, msg string) shared.Condition {
		return merged(old.Find(t), shared.Condition{Type: t, Status: status, Reason: reason, Message: msg}, ts)
	}
	const (
		avail = shared.NodeNetworkConfigurationPolicyConditionAvailable
		degr  = shared.NodeNetworkConfigurationPolicyConditionDegraded
		prog  = shared.NodeNetworkConfigurationPolicyConditionProgressing
	)
	f, t := corev1.ConditionFalse, corev1.ConditionTrue
	switch {
	case s.matching == 0:
		msg := "Policy does not match any node"
		r := shared.NodeNetworkConfigurationPolicyConditionConfigurationNoMatchingNode
		return shared.ConditionList{set(avail, t, r, msg), set(degr, f, r, msg), set(prog, f, r, msg)}
	case s.failing > 0:
		msg := fmt.Sprintf("%d/%d nodes failed to configure", s.failing, s.matching)
		r := shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure
		return shared.ConditionList{set(avail, f, r, msg), set(degr, t, r, msg), set(prog, f, r, msg)}
	case s.available >= s.matching:
		msg := fmt.Sprintf("%d/%d nodes successfully configured", s.available, s.matching)
		r := shared.NodeNetworkConfigurationPolicyConditionSuccessfullyConfigured
		return shared.ConditionList{set(avail, t, r, msg), set(degr, f, r, msg), set(prog, f, r, msg)}
	default:
		msg := fmt.Sprintf("Policy is progressing %d/%d nodes finished", s.available, s.matching)
		r := shared.NodeNetworkConfigurationPolicyConditionConfigurationProgressing
		return shared.ConditionList{set(avail, f, r, msg), set(degr, f, r, msg), set(prog, t, r, msg)}
	}
}

// sameConditions compares condition lists ignoring times.
func sameConditions(a, b shared.ConditionList) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		o := b.Find(c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	return true
}

package handler

import (
	"fmt"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/conditions"
)

// outcome is the state an enactment is left in: which of its condition types
// is True, why, and when to look again.
type outcome struct {
	condition    shared.ConditionType
	reason       shared.ConditionReason
	message      string
	requeueAfter time.Duration
	// waitingFor names the pool the enactment waits on for want of a free
	// address (IPPoolExhausted).
	waitingFor string
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

// withConditions returns the enactment's conditions with o's type True
// and every other type False; times move only when something changes.
func withConditions(old shared.ConditionList, o outcome, now time.Time) shared.ConditionList {
	return conditions.OneTrue(old, shared.NodeNetworkConfigurationEnactmentConditionTypes[:], o.condition, o.reason, o.message, now)
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
	set := func(t shared.ConditionType, status corev1.ConditionStatus, reason shared.ConditionReason, msg string) shared.Condition {
		return conditions.Merge(old.Find(t), shared.Condition{Type: t, Status: status, Reason: reason, Message: msg}, now)
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

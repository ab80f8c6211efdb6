package handler

import (
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
	// waitingFor names the pool the enactment waits on: for want of a free
	// address (IPPoolExhausted) or until it can serve (IPPoolNotAvailable).
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

// failedToConfigure is the outcome of a state that could not be rendered or
// applied: Failing / FailedToConfigure, tried again after FailedRequeue.
func (r *Reconciler) failedToConfigure(message string) outcome {
	o := failing(string(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure), message)
	o.requeueAfter = r.FailedRequeue
	return o
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

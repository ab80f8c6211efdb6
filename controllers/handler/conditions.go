package handler

import (
	"fmt"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
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
	// failures, if set, is the enactment's new count of failed attempts.
	failures *nncev1beta1.ConfigureFailures
}

func available(message string) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionAvailable,
		reason: shared.NodeNetworkConfigurationEnactmentConditionSuccessfullyConfigured, message: message}
}

func progressing(message string) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionProgressing,
		reason: shared.NodeNetworkConfigurationEnactmentConditionConfigurationProgressing, message: message}
}

// waitingInQueue is the outcome of a slot request that the policy
// controller queued: maxUnavailable nodes are being configured.
func waitingInQueue() outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionPending,
		reason:  shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached,
		message: "maxUnavailable nodes are already being configured; waiting"}
}

// aborted is the outcome of a slot request that the policy controller
// refused: the rollout was aborted.
func aborted(message string) outcome {
	return outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionAborted,
		reason: shared.NodeNetworkConfigurationEnactmentConditionConfigurationAborted, message: message}
}

// keepsSlot reports whether the enactment still asks for its slot, or
// holds it, once it shows o: it is waiting for the slot or applying.
func (o outcome) keepsSlot() bool {
	return o.condition == shared.NodeNetworkConfigurationEnactmentConditionProgressing ||
		o.condition == shared.NodeNetworkConfigurationEnactmentConditionPending &&
			o.reason == shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached
}

// ReasonRetrying is kubernetes-nmstate's reason of a Failing enactment
// whose failure will be retried.
const ReasonRetrying = "Retrying"

// configureFailed is the outcome of an attempt to configure the policy's
// generation that failed (the state could not be rendered or applied, or a
// probe failed and it was rolled back): Failing / Retrying "Retrying n/m"
// while r.Retry has retries left, tried again after its backoff; then
// Failing / FailedToConfigure, not tried again until the policy changes.
func (r *Reconciler) configureFailed(s *scope, message string) outcome {
	e := s.enactment
	n := int32(1)
	if f := e.Status.Failures; f != nil && e.Status.PolicyGeneration == s.policy.Generation {
		n = f.Count + 1
	}
	failures := &nncev1beta1.ConfigureFailures{Count: n, Last: metav1.NewTime(r.Clock.Now().Truncate(time.Second))}
	if retries := int32(r.Retry.Steps); n <= retries {
		after := retryDelay(r.Retry, n)
		o := failing(ReasonRetrying, fmt.Sprintf("Retrying %d/%d in %s: %s", n, retries, after, message))
		o.failures, o.requeueAfter = failures, after
		return o
	}
	attempts := "1 attempt"
	if n > 1 {
		attempts = fmt.Sprintf("%d attempts", n)
	}
	o := failing(string(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure),
		fmt.Sprintf("%s (gave up after %s; change the policy to try again)", message, attempts))
	o.failures = failures
	return o
}

// retryDelay is the backoff before retry n (1-based) of b.
func retryDelay(b wait.Backoff, n int32) time.Duration {
	return backoff.Delay(b, int(n))
}

// retryLeft returns how long an enactment whose last attempt failed with
// Retrying still waits for its retry; 0 if it does not wait.
func retryLeft(e *nncev1beta1.NodeNetworkConfigurationEnactment, now time.Time, b wait.Backoff) time.Duration {
	f := e.Status.Failures
	if f == nil || !conditions.IsTrueWith(e.Status.Conditions, shared.NodeNetworkConfigurationEnactmentConditionFailing, ReasonRetrying) {
		return 0
	}
	return max(f.Last.Add(retryDelay(b, f.Count)).Sub(now), 0)
}

// failedFinally reports whether the enactment's generation failed with
// every retry spent.
func failedFinally(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	return e.Status.Failures != nil && conditions.IsTrueWith(e.Status.Conditions,
		shared.NodeNetworkConfigurationEnactmentConditionFailing, shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure)
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
// and the others as kubernetes-nmstate writes them (conditions.Enactment);
// times move only when something changes.
func withConditions(old shared.ConditionList, o outcome, now time.Time) shared.ConditionList {
	return conditions.Enactment(old, o.condition, o.reason, o.message, now)
}

// trueCondition returns the enactment's True condition type, or "".
func trueCondition(e *nncev1beta1.NodeNetworkConfigurationEnactment) shared.ConditionType {
	return conditions.TrueType(e.Status.Conditions)
}

package handler

import (
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	"k8s.io/apimachinery/pkg/util/wait"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// step is what a reconcile does.
type step int

const (
	// stepDone: the enactment shows this generation applied, or given
	// up on (its retries spent, or its rollout aborted).
	stepDone step = iota
	// stepWait: a slot was asked for and is not granted yet (by the
	// handler, or by a served request), the pool controller is to serve
	// the enactment, or a retry's backoff runs.
	stepWait
	// stepRetire: the enactment ends (policy gone or deselected, or the
	// enactment is being deleted).
	stepRetire
	// stepEnact: allocate, record, render and ask for a slot.
	stepEnact
	// stepApply: the slot is granted; apply what was recorded.
	stepApply
	// stepAnswer: the policy controller answered the slot request, and
	// the enactment does not show it yet: show it (slotAnswer).
	stepAnswer
)

// timing is what decide needs to know of the handler's waits.
type timing struct {
	// busyWait is how long an enactment waits for the pool controller to
	// serve it before allocating itself.
	busyWait time.Duration
	// retry spaces the retries of a failed generation.
	retry wait.Backoff
}

func (r *Reconciler) timing() timing {
	return timing{busyWait: r.FailedRequeue, retry: r.Retry}
}

// decide is the pure heart of the handler: what to do for s at now. An
// enactment that left its allocation to the pool controller (IPPoolBusy)
// waits for it for up to t.busyWait before trying the pool again itself;
// one whose generation failed waits for its retry's backoff, and stays
// failed once its retries are spent or its rollout was aborted.
func (s *scope) decide(now time.Time, t timing) step {
	busyWait := t.busyWait
	e := s.enactment
	switch {
	case e != nil && !e.DeletionTimestamp.IsZero(), !s.selected:
		if e == nil {
			return stepDone
		}
		return stepRetire
	case e != nil && e.Status.PolicyGeneration == s.policy.Generation && !s.poolRecorded(e.Status.WaitingForIPPool) &&
		waitsForServe(e, now, busyWait):
		return stepWait
	case e != nil && s.slotAnswer() != nil:
		return stepAnswer
	case e != nil && grantAhead(e, s.policy.Generation):
		// Granted for a generation this handler's cache does not show
		// yet: the policy's event brings it back.
		return stepWait
	case e != nil && s.captureErr == nil && enactmentrecord.GrantedOnRequest(e, s.policy.Generation) && s.recordsComplete():
		return stepApply
	case e != nil && s.captureErr == nil && enactmentrecord.Requesting(e) && s.recordsComplete() &&
		(queued(e) || enactmentrecord.GrantedForEarlier(e, s.policy.Generation)):
		// Served, and queued for a slot, or granted one for an earlier
		// generation of the policy (it changed since): the handler asks
		// for it itself from the request's place in the queue.
		return stepEnact
	case e != nil && s.captureErr == nil && enactmentrecord.Requesting(e) && s.recordsComplete() && waitsForServe(e, now, busyWait):
		// Served, or a slot request alone: the request asks the policy
		// controller for a slot (enactmentrecord.AsksForSlot), and its
		// answer's event brings it back. Unanswered for busyWait (a policy
		// controller that does not know the request), the handler asks
		// itself.
		return stepWait
	case e != nil && enactmentrecord.RequestsAddresses(e) && !s.recordsComplete() && waitsForServe(e, now, busyWait):
		return stepWait
	case e == nil || e.Status.PolicyGeneration != s.policy.Generation || !s.recordsComplete():
		return stepEnact
	case e.Annotations[ippoolv1.NudgeAnnotation] != "" && e.Status.Slot == nil:
		return stepEnact
	case e.Status.Slot == nil && (failedFinally(e) || trueCondition(e) == shared.NodeNetworkConfigurationEnactmentConditionAborted):
		return stepDone
	case e.Status.Slot == nil && retryLeft(e, now, t.retry) > 0:
		return stepWait
	case e.Status.Slot != nil && e.Status.Slot.Granted != nil && grantedFor(e.Status.Slot, e.Status.PolicyGeneration):
		return stepApply
	case e.Status.Slot != nil && e.Status.Slot.Granted != nil:
		// Granted for another generation than the request's (the policy
		// controller's cache behind; it answers no such request once it
		// caught up): the grant is not this generation's; ask again.
		return stepEnact
	case e.Status.Slot != nil:
		return stepWait
	case trueCondition(e) == shared.NodeNetworkConfigurationEnactmentConditionAvailable:
		return stepDone
	default:
		return stepEnact
	}
}

// grantAhead reports whether the policy controller granted the
// enactment's slot for a later generation of the policy than generation,
// the one this handler's cache shows: the cache is behind.
func grantAhead(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) bool {
	slot := e.Status.Slot
	return slot != nil && slot.Granted != nil && slot.PolicyGeneration > generation
}

// grantedFor reports whether a grant of a handler's request is for
// generation, the request's: it names it, or names none (a policy
// controller of an earlier version; its grant is taken as it was).
func grantedFor(slot *nncev1beta1.ApplySlot, generation int64) bool {
	return slot.PolicyGeneration == 0 || slot.PolicyGeneration == generation
}

// slotAnswer returns what the enactment is to show of the policy
// controller's answer to its slot request that it does not show yet, or
// nil: Aborted for the policy's generation (the slot given back, the
// record kept), or Pending / MaxUnavailableLimitReached for a request of
// the handler's that waits in the queue. A served request that waits is
// enacted instead (decide), and a grant needs no word: the apply's outcome
// follows it.
func (s *scope) slotAnswer() *outcome {
	e := s.enactment
	slot := e.Status.Slot
	switch {
	case slot == nil:
		return nil
	case slot.Aborted != nil && slot.Aborted.PolicyGeneration == s.policy.Generation:
		o := aborted(slot.Aborted.Message)
		return &o
	case queued(e) && !slot.Requested.IsZero() && e.Status.PolicyGeneration == s.policy.Generation && !showsQueued(e):
		o := waitingInQueue()
		return &o
	}
	return nil
}

// queued reports whether the enactment's request waits for a slot, as the
// policy controller marked it.
func queued(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	slot := e.Status.Slot
	return slot != nil && slot.Queued != nil && slot.Granted == nil && slot.Aborted == nil
}

// showsQueued reports whether the enactment shows that it waits for a
// maxUnavailable slot.
func showsQueued(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	return conditions.IsTrueWith(e.Status.Conditions, shared.NodeNetworkConfigurationEnactmentConditionPending,
		shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached)
}

// waitLeft returns how long a waiting enactment still waits: for the pool
// controller to serve it, or for its next retry.
func waitLeft(e *nncev1beta1.NodeNetworkConfigurationEnactment, now time.Time, t timing) time.Duration {
	return max(busyLeft(e, now, t.busyWait), retryLeft(e, now, t.retry))
}

// waitsForServe reports whether the enactment is Pending / IPPoolBusy, or
// a new enactment's request (for addresses, or a slot alone), since less
// than wait before now.
func waitsForServe(e *nncev1beta1.NodeNetworkConfigurationEnactment, now time.Time, wait time.Duration) bool {
	return busyLeft(e, now, wait) > 0
}

// busyLeft returns how long an enactment that asks the pool controller for
// addresses (a new one's request, or Pending / IPPoolBusy) still waits for
// it before its handler looks again (and asks again, or with SelfAllocate
// allocates itself), or a new one's request the policy controller for a
// slot before its handler writes the request itself; 0 if it is not
// waiting.
func busyLeft(e *nncev1beta1.NodeNetworkConfigurationEnactment, now time.Time, wait time.Duration) time.Duration {
	if enactmentrecord.Requesting(e) {
		return max(e.CreationTimestamp.Add(wait).Sub(now), 0)
	}
	if !conditions.IsTrueWith(e.Status.Conditions, shared.NodeNetworkConfigurationEnactmentConditionPending, ippoolv1.ReasonIPPoolBusy) {
		return 0
	}
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionPending)
	return max(c.LastHeartbeatTime.Add(wait).Sub(now), 0)
}

// poolRecorded reports whether the enactment records an address for every
// capture of the policy that draws from pool.
func (s *scope) poolRecorded(pool string) bool {
	return recordsAll(s.enactment, s.captures.RefsOf(pool))
}

// recordsComplete reports whether the enactment records an address for
// every ippool capture of the policy (none are needed when the captures
// do not parse).
func (s *scope) recordsComplete() bool {
	return recordsAll(s.enactment, s.captures.Refs)
}

// recordsAll reports whether e records an address for every one of refs.
func recordsAll(e *nncev1beta1.NodeNetworkConfigurationEnactment, refs []capture.Ref) bool {
	return enactmentrecord.Complete(e, refs)
}

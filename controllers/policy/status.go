package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/conditions"
)

// DefaultMaxUnavailable is kubernetes-nmstate's default.
var DefaultMaxUnavailable = intstr.FromString("50%")

// summary counts the enactments of a policy's matching nodes by state.
// Enactments of an older policy generation count as progressing.
type summary struct {
	matching, available, failing, aborted, progressing int
}

// summarize counts enactments, which must be those of matching nodes.
func summarize(matching int, generation int64, enactments []*nncev1beta1.NodeNetworkConfigurationEnactment) summary {
	s := summary{matching: matching}
	for _, e := range enactments {
		switch {
		case e.Status.PolicyGeneration != generation:
			s.progressing++
		case conditions.TrueType(e.Status.Conditions) == shared.NodeNetworkConfigurationEnactmentConditionAvailable:
			s.available++
		case conditions.TrueType(e.Status.Conditions) == shared.NodeNetworkConfigurationEnactmentConditionFailing:
			s.failing++
		case conditions.TrueType(e.Status.Conditions) == shared.NodeNetworkConfigurationEnactmentConditionAborted:
			s.aborted++
		default:
			s.progressing++
		}
	}
	return s
}

// ignored is the policy's Ignored condition type.
const ignored = shared.ConditionType(ippoolv1.PolicyConditionIgnored)

// policyConditions computes the policy's Available, Degraded, Progressing
// and Ignored conditions from a summary, as kubernetes-nmstate reports
// them. A policy that selects no node is Ignored, not Available: nothing
// was configured.
func policyConditions(old shared.ConditionList, s summary, now time.Time) shared.ConditionList {
	const (
		avail = shared.NodeNetworkConfigurationPolicyConditionAvailable
		degr  = shared.NodeNetworkConfigurationPolicyConditionDegraded
		prog  = shared.NodeNetworkConfigurationPolicyConditionProgressing
	)
	// list sets trueType True with reason and message, and the others as
	// kubernetes-nmstate does: False with the same reason and no message,
	// but Available and Degraded Unknown while the policy progresses, and
	// Progressing's reason ConfigurationProgressing once it is Degraded.
	list := func(trueType shared.ConditionType, r shared.ConditionReason, msg string) shared.ConditionList {
		out := make(shared.ConditionList, 0, 4)
		for _, t := range []shared.ConditionType{avail, degr, prog, ignored} {
			want := shared.Condition{Type: t, Status: corev1.ConditionFalse, Reason: r}
			switch {
			case t == trueType:
				want.Status, want.Message = corev1.ConditionTrue, msg
			case trueType == prog && (t == avail || t == degr):
				want.Status = corev1.ConditionUnknown
			case trueType == degr && t == prog:
				want.Reason = shared.NodeNetworkConfigurationPolicyConditionConfigurationProgressing
			}
			out = append(out, conditions.Merge(old.Find(t), want, now))
		}
		return out
	}
	switch {
	case s.matching == 0:
		return list(ignored, shared.NodeNetworkConfigurationPolicyConditionConfigurationNoMatchingNode, "Policy does not match any node")
	case s.failing > 0 || s.aborted > 0:
		msg := fmt.Sprintf("%d/%d nodes failed to configure", s.failing, s.matching)
		if s.aborted > 0 {
			msg += fmt.Sprintf(", %d aborted", s.aborted)
		}
		return list(degr, shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, msg)
	case s.available >= s.matching:
		return list(avail, shared.NodeNetworkConfigurationPolicyConditionSuccessfullyConfigured,
			fmt.Sprintf("%d/%d nodes successfully configured", s.available, s.matching))
	default:
		return list(prog, shared.NodeNetworkConfigurationPolicyConditionConfigurationProgressing,
			fmt.Sprintf("Policy is progressing %d/%d nodes finished", s.available, s.matching))
	}
}

// maxUnavailable returns how many of matching nodes may apply at once:
// the policy's maxUnavailable (or DefaultMaxUnavailable) of them, rounded
// up, and at least one.
func maxUnavailable(spec *intstr.IntOrString, matching int) (int, error) {
	v := DefaultMaxUnavailable
	if spec != nil {
		v = *spec
	}
	limit, err := intstr.GetScaledValueFromIntOrPercent(&v, matching, true)
	if err != nil {
		return 0, fmt.Errorf("maxUnavailable %q: %w", v.String(), err)
	}
	return max(limit, 1), nil
}

// slots is what the controller does with a policy's apply slots.
type slots struct {
	// held counts the grants that still count against maxUnavailable.
	held int
	// failed counts the enactments whose node gave up on the policy's
	// generation (Failing / FailedToConfigure).
	failed int
	// grant and queue are the requests to grant now and those that wait,
	// oldest first; abort are the requests refused because failed reached
	// maxUnavailable.
	grant, queue, abort []*nncev1beta1.NodeNetworkConfigurationEnactment
	// nextExpiry is when the oldest counted grant stops counting (zero if
	// none): the controller looks again then.
	nextExpiry time.Time
}

// planSlots decides which requests of enactments to grant under limit. A
// grant older than timeout does not count: its handler died mid-apply.
// Once limit nodes gave up on generation, every request is aborted, as
// kubernetes-nmstate does: a policy that broke that many nodes is not
// rolled out further.
func planSlots(enactments []*nncev1beta1.NodeNetworkConfigurationEnactment, generation int64, limit int, now time.Time,
	timeout time.Duration) slots {
	var s slots
	var requests []*nncev1beta1.NodeNetworkConfigurationEnactment
	for _, e := range enactments {
		if gaveUp(e, generation) {
			s.failed++
		}
		slot := e.Status.Slot
		switch {
		case slot == nil:
		case slot.Granted == nil:
			requests = append(requests, e)
		case now.Sub(slot.Granted.Time) < timeout:
			s.held++
			if expiry := slot.Granted.Add(timeout); s.nextExpiry.IsZero() || expiry.Before(s.nextExpiry) {
				s.nextExpiry = expiry
			}
		}
	}
	slices.SortFunc(requests, func(a, b *nncev1beta1.NodeNetworkConfigurationEnactment) int {
		if c := a.Status.Slot.Requested.Compare(b.Status.Slot.Requested.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if s.failed >= limit {
		s.abort = requests
		return s
	}
	free := max(limit-s.held, 0)
	n := min(free, len(requests))
	s.grant, s.queue = requests[:n], requests[n:]
	return s
}

// gaveUp reports whether the enactment's node gave up on generation: its
// retries are spent.
func gaveUp(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) bool {
	return e.Status.PolicyGeneration == generation && conditions.IsTrueWith(e.Status.Conditions,
		shared.NodeNetworkConfigurationEnactmentConditionFailing, shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure)
}

// microNow is now at the resolution status.slot keeps.
func microNow(now time.Time) *metav1.MicroTime {
	t := metav1.NewMicroTime(now.Truncate(time.Microsecond))
	return &t
}

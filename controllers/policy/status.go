package policy

import (
	"cmp"
	"slices"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
)

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

// planSlots decides which requests of enactments to grant under limit: a
// slot its handler requested (status.slot.requested), or a new
// enactment's request that onRequest says asks for one
// (enactmentrecord.AsksForSlot). A grant older than timeout does not count: its
// handler died mid-apply. Once limit nodes gave up on generation, every
// request is aborted, as kubernetes-nmstate does: a policy that broke
// that many nodes is not rolled out further. An aborted request waits
// for its handler to end it, and is neither granted nor counted, unless
// the abort is older than both generation and the request's own (the
// controller's cache was behind the handler's when it aborted): that one
// is answered again. A request of an earlier generation that was aborted
// is its handler's to renew for the policy as it is now, or a grant would
// have it apply the generation that broke maxUnavailable nodes. A served
// new enactment that was aborted asks for nothing (enactmentrecord.AsksForSlot):
// its handler asks again. A handler's request names the generation it
// was written for (status.policyGeneration); one for another generation
// than the controller's is left unanswered: a handler whose cache is
// behind renews it when it sees the policy as it is, and a controller
// whose cache is behind answers it when the policy's event reaches it. A
// grant is for the generation it names (status.slot.policyGeneration),
// and only that generation is applied on it.
func planSlots(enactments []*nncev1beta1.NodeNetworkConfigurationEnactment, generation int64, limit int, now time.Time,
	timeout time.Duration, onRequest func(*nncev1beta1.NodeNetworkConfigurationEnactment) bool) slots {
	var s slots
	var requests []*nncev1beta1.NodeNetworkConfigurationEnactment
	for _, e := range enactments {
		if gaveUp(e, generation) {
			s.failed++
		}
		slot := e.Status.Slot
		switch {
		case slot != nil && slot.Aborted != nil && (slot.Aborted.PolicyGeneration == generation ||
			e.Status.PolicyGeneration <= slot.Aborted.PolicyGeneration):
		case slot == nil || slot.Requested.IsZero() && slot.Granted == nil:
			if onRequest != nil && onRequest(e) {
				requests = append(requests, e)
			}
		case slot.Granted == nil:
			if e.Status.PolicyGeneration == generation {
				requests = append(requests, e)
			}
		case now.Sub(slot.Granted.Time) < timeout:
			s.held++
			if expiry := slot.Granted.Add(timeout); s.nextExpiry.IsZero() || expiry.Before(s.nextExpiry) {
				s.nextExpiry = expiry
			}
		}
	}
	slices.SortFunc(requests, func(a, b *nncev1beta1.NodeNetworkConfigurationEnactment) int {
		if c := requestedAt(a).Compare(requestedAt(b)); c != 0 {
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

// requestedAt returns when the enactment asked for its slot: its handler's
// request, or its creation for a new enactment's request.
func requestedAt(e *nncev1beta1.NodeNetworkConfigurationEnactment) time.Time {
	if e.Status.Slot == nil || e.Status.Slot.Requested.IsZero() {
		return e.CreationTimestamp.Time
	}
	return e.Status.Slot.Requested.Time
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

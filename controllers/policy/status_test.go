package policy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
)

func TestPlanSlots(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	recent, old := t0.Add(-time.Minute), t0.Add(-10*time.Minute)
	enactments := []*nncev1beta1.NodeNetworkConfigurationEnactment{
		slotted("c", t0.Add(-3*time.Second), nil),
		slotted("a", t0.Add(-time.Second), nil),
		slotted("b", t0.Add(-3*time.Second), nil),
		slotted("held", t0.Add(-2*time.Minute), &recent),
		slotted("dead", t0.Add(-20*time.Minute), &old),
		{}, // no request
	}
	s := planSlots(enactments, 0, 3, t0, 5*time.Minute, nil)
	if s.held != 1 {
		t.Errorf("held = %d, want 1 (the expired grant does not count)", s.held)
	}
	if got := names(s.grant); len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Errorf("grant = %v, want the two oldest requests, by name on a tie: [b c]", got)
	}
	if got := names(s.queue); len(got) != 1 || got[0] != "a" {
		t.Errorf("queue = %v, want [a]", got)
	}
	if want := recent.Add(5 * time.Minute); !s.nextExpiry.Equal(want) {
		t.Errorf("nextExpiry = %v, want %v", s.nextExpiry, want)
	}
	// A request written for another generation (the handler's cache, or
	// the controller's, behind the other's) is neither granted nor queued,
	// however long it waited: a grant would have its node apply a
	// generation no one granted.
	for _, generation := range []int64{-1, 1} {
		other := slotted("other", t0.Add(-time.Hour), nil)
		other.Status.PolicyGeneration = generation
		s := planSlots(append(slices.Clone(enactments), other), 0, 3, t0, 5*time.Minute, nil)
		if got := names(s.grant); len(got) != 2 || got[0] != "b" || got[1] != "c" || len(s.queue) != 1 {
			t.Errorf("with a request for generation %d: grant %v queue %v, want [b c] and [a]", generation, got, names(s.queue))
		}
	}
	if s := planSlots(enactments, 0, 1, t0, 5*time.Minute, nil); len(s.grant) != 0 || len(s.queue) != 3 {
		t.Errorf("with the limit held: grant %v queue %v", names(s.grant), names(s.queue))
	}
	// Nodes that gave up on generation 0 reach the limit: every request
	// is aborted; a node that gave up on an older generation does not
	// count.
	gaveUp := func(generation int64) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
		e.Status.PolicyGeneration = generation
		e.Status.Conditions = conditions.OneTrue(nil, shared.NodeNetworkConfigurationEnactmentConditionTypes[:],
			shared.NodeNetworkConfigurationEnactmentConditionFailing, "", "", time.Now())
		e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing).Reason =
			shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure
		return e
	}
	withFailed := append([]*nncev1beta1.NodeNetworkConfigurationEnactment{gaveUp(0), gaveUp(-1)}, enactments...)
	if s := planSlots(withFailed, 0, 2, t0, 5*time.Minute, nil); s.failed != 1 || len(s.abort) != 0 || len(s.grant) != 1 {
		t.Errorf("one failure under a limit of 2: failed %d abort %v grant %v", s.failed, names(s.abort), names(s.grant))
	}
	withFailed = append(withFailed, gaveUp(0))
	s = planSlots(withFailed, 0, 2, t0, 5*time.Minute, nil)
	if got := names(s.abort); s.failed != 2 || len(got) != 3 || len(s.grant)+len(s.queue) != 0 {
		t.Errorf("two failures at a limit of 2: failed %d abort %v grant %v queue %v", s.failed, got, names(s.grant), names(s.queue))
	}
}

// TestPlanSlotsOnRequest: a new enactment whose creation's request the
// pool controller has served asks for a slot without a write of its
// handler's; it takes its turn by its creation time, among the slots
// handlers requested. One the request does not ask for (onRequest says no)
// waits for its handler.
func TestPlanSlotsOnRequest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	served := func(name string, created time.Time) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
		e.Name, e.CreationTimestamp = name, metav1.NewTime(created)
		return e
	}
	enactments := []*nncev1beta1.NodeNetworkConfigurationEnactment{
		slotted("requested", t0.Add(-2*time.Second), nil),
		served("served-early", t0.Add(-3*time.Second)),
		served("served-late", t0.Add(-time.Second)),
		served("unserved", t0.Add(-4*time.Second)),
	}
	onRequest := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool { return e.Name != "unserved" }
	s := planSlots(enactments, 0, 2, t0, 5*time.Minute, onRequest)
	if got := names(s.grant); len(got) != 2 || got[0] != "served-early" || got[1] != "requested" {
		t.Errorf("grant = %v, want the two oldest requests: [served-early requested]", got)
	}
	if got := names(s.queue); len(got) != 1 || got[0] != "served-late" {
		t.Errorf("queue = %v, want [served-late]", got)
	}
	if s := planSlots(enactments, 0, 2, t0, 5*time.Minute, nil); len(s.grant)+len(s.queue) != 1 {
		t.Errorf("without onRequest only the handler's request asks: grant %v queue %v", names(s.grant), names(s.queue))
	}

	// Queued, a served request keeps its place: its creation, not when it
	// was queued. A request aborted at the generation, whether its
	// handler's or a served one, asks for nothing until its handler ends
	// it; so does one aborted at its own, earlier generation (its handler
	// renews it for the policy as it is now: a grant would have it apply
	// the generation that failed). One aborted at a generation older than
	// its own (the controller's cache was behind) is answered again.
	queued := served("served-queued", t0.Add(-10*time.Second))
	queued.Status.Slot = &nncev1beta1.ApplySlot{Queued: microNow(t0)}
	abortedServed := served("aborted-served", t0.Add(-20*time.Second))
	abortedServed.Status.Slot = &nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 2}}
	abortedRequest := slotted("aborted-request", t0.Add(-20*time.Second), nil)
	abortedRequest.Status.PolicyGeneration = 2
	abortedRequest.Status.Slot.Aborted = &nncev1beta1.SlotAborted{PolicyGeneration: 2}
	abortedThenFixed := slotted("aborted-then-fixed", t0.Add(-20*time.Second), nil)
	abortedThenFixed.Status.PolicyGeneration = 1
	abortedThenFixed.Status.Slot.Aborted = &nncev1beta1.SlotAborted{PolicyGeneration: 1}
	abortedEarlier := slotted("aborted-earlier", t0.Add(-2500*time.Millisecond), nil)
	abortedEarlier.Status.PolicyGeneration = 2
	abortedEarlier.Status.Slot.Aborted = &nncev1beta1.SlotAborted{PolicyGeneration: 1}
	requested := slotted("requested", t0.Add(-2*time.Second), nil)
	requested.Status.PolicyGeneration = 2 // a handler's request is for the generation it shows
	enactments = []*nncev1beta1.NodeNetworkConfigurationEnactment{requested, enactments[1], queued, abortedServed, abortedRequest,
		abortedThenFixed, abortedEarlier}
	s = planSlots(enactments, 2, 2, t0, 5*time.Minute, func(*nncev1beta1.NodeNetworkConfigurationEnactment) bool { return true })
	if got := names(s.grant); len(got) != 2 || got[0] != "served-queued" || got[1] != "served-early" {
		t.Errorf("grant = %v, want the two oldest requests: [served-queued served-early]", got)
	}
	if got := names(s.queue); len(got) != 2 || got[0] != "aborted-earlier" || got[1] != "requested" {
		t.Errorf("queue = %v, want [aborted-earlier requested]", got)
	}
}

// TestCountsHeldBack: a write that only reports changed counts waits until
// ProgressEvery has passed since the status last changed; the start and
// the end of a rollout, and a failure, are written at once.
func TestCountsHeldBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	progressing := func(done, of int, at time.Time) shared.ConditionList {
		return policystatus.Conditions(nil, policystatus.Summary{Matching: of, Available: done}, at)
	}
	failed := policystatus.Conditions(nil, policystatus.Summary{Matching: 10, Available: 8, Failing: 1}, t0)
	tests := []struct {
		name   string
		before shared.ConditionList
		count  *metav1.Time
		want   shared.ConditionList
		now    time.Time
		held   time.Duration
	}{
		{"the start of a rollout", nil, nil, progressing(0, 10, t0), t0, 0},
		{"progress soon after the last change", progressing(1, 10, t0), nil, progressing(2, 10, t0), t0.Add(2 * time.Second),
			ProgressEvery - 2*time.Second},
		{"progress soon after the slot count changed", progressing(1, 10, t0), &metav1.Time{Time: t0.Add(3 * time.Second)},
			progressing(2, 10, t0), t0.Add(4 * time.Second), ProgressEvery - time.Second},
		{"progress once the interval has passed", progressing(1, 10, t0), nil, progressing(2, 10, t0), t0.Add(ProgressEvery), 0},
		{"the end of a rollout", progressing(9, 10, t0), nil, progressing(10, 10, t0), t0.Add(time.Second), 0},
		{"a failure", progressing(8, 10, t0), nil, failed, t0.Add(time.Second), 0},
		{"nodes removed after the rollout", progressing(10, 10, t0), nil, progressing(8, 8, t0), t0.Add(time.Second),
			ProgressEvery - time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &nmstatev1.NodeNetworkConfigurationPolicy{}
			p.Status.Conditions = tt.before
			p.Status.LastUnavailableNodeCountUpdate = tt.count
			if got := countsHeldBack(p, tt.want, tt.now); got != tt.held {
				t.Errorf("held back %s, want %s", got, tt.held)
			}
		})
	}
}

func slotted(name string, requested time.Time, granted *time.Time) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
	e.Name = name
	e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(requested)}
	if granted != nil {
		e.Status.Slot.Granted = microNow(*granted)
	}
	return e
}

func names(es []*nncev1beta1.NodeNetworkConfigurationEnactment) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// TestToMarkOneRoundAPass: a pass marks as queued at most one round of
// writes of the waiting requests, the longest waiting first, skipping
// those marked already, and says whether more wait to be marked: marks
// written in one long pass held back the grants of the slots that freed
// meanwhile.
func TestToMarkOneRoundAPass(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var waiting []*nncev1beta1.NodeNetworkConfigurationEnactment
	for i := range marksPerPass + 3 {
		e := slotted(fmt.Sprintf("n%02d", i), t0.Add(time.Duration(i)*time.Second), nil)
		if i == 1 {
			e.Status.Slot.Queued = microNow(t0) // marked by an earlier pass
		}
		waiting = append(waiting, e)
	}
	first, later := toMark(waiting)
	if len(first) != marksPerPass || !later {
		t.Fatalf("toMark = %d, more %v; want %d and more", len(first), later, marksPerPass)
	}
	if got := names(first); got[0] != "n00" || got[1] != "n02" || got[len(got)-1] != fmt.Sprintf("n%02d", marksPerPass) {
		t.Errorf("toMark = %v, want n00, n02… (n01 is marked already), the longest waiting first", got)
	}
	first, later = toMark(waiting[marksPerPass:])
	if len(first) != 3 || later {
		t.Errorf("toMark of the last three = %v, more %v; want all three and no more", names(first), later)
	}
}

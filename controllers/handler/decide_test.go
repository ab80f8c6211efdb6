package handler

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2}}
	captures, err := capture.Parse(map[string]string{"addr": "ippool.pool.allocate"})
	if err != nil {
		t.Fatal(err)
	}
	enactment := func(state shared.ConditionType, reason string, change func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
		e.Status.PolicyGeneration = 2
		e.Status.Conditions = withConditions(nil, outcome{condition: state, reason: shared.ConditionReason(reason)}, t0)
		writeRecord(e, captures, map[string]capture.Address{"addr": {IP: mustAddr(t, "10.0.0.1"), PrefixLength: 24}},
			addressStates(map[string]capture.Address{"addr": {IP: mustAddr(t, "10.0.0.1"), PrefixLength: 24}}), shared.NodeNetworkConfigurationEnactmentMetaInfo{})
		if change != nil {
			change(e)
		}
		return e
	}
	avail := shared.NodeNetworkConfigurationEnactmentConditionAvailable
	pend := shared.NodeNetworkConfigurationEnactmentConditionPending
	prog := shared.NodeNetworkConfigurationEnactmentConditionProgressing
	fail := shared.NodeNetworkConfigurationEnactmentConditionFailing
	// failures records n failed attempts, the last at t0.
	failures := func(n int32) func(*nncev1beta1.NodeNetworkConfigurationEnactment) {
		return func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Failures = &nncev1beta1.ConfigureFailures{Count: n, Last: metav1.NewTime(t0)}
		}
	}
	noRecord := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		e.Status.IPPool, e.Status.CapturedStates = nil, nil
	}
	waiting := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		noRecord(e)
		e.Status.WaitingForIPPool = "pool"
	}
	// A new enactment that asks the pool controller: created at t0,
	// nothing written since.
	requested := func(change func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0),
			Annotations: map[string]string{ippoolv1.RequestAnnotation: "pool"}}}
		if change != nil {
			change(e)
		}
		return e
	}
	// A new enactment of a policy without ippool captures, which asks the
	// policy controller for a slot alone.
	slotRequested := func(change func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := requested(change)
		e.Annotations = map[string]string{ippoolv1.SlotRequestAnnotation: "true"}
		return e
	}
	recorded := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		a := map[string]capture.Address{"addr": {IP: mustAddr(t, "10.0.0.1"), PrefixLength: 24}}
		writeRecord(e, captures, a, addressStates(a), shared.NodeNetworkConfigurationEnactmentMetaInfo{})
	}
	tests := []struct {
		name      string
		policy    *nmstatev1.NodeNetworkConfigurationPolicy
		selected  bool
		enactment *nncev1beta1.NodeNetworkConfigurationEnactment
		now       time.Time
		want      step
	}{
		{"applied: nothing to do", policy, true, enactment(avail, "", nil), t0, stepDone},
		{"no enactment yet", policy, true, nil, t0, stepEnact},
		{"policy gone, nothing to retire", nil, false, nil, t0, stepDone},
		{"deselected", policy, false, enactment(avail, "", nil), t0, stepRetire},
		{"being deleted", policy, true, enactment(avail, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.DeletionTimestamp = &metav1.Time{Time: t0}
		}), t0, stepRetire},
		{"new generation", policy, true, enactment(avail, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.PolicyGeneration = 1
		}), t0, stepEnact},
		{"record dropped by a reset", policy, true, enactment(avail, "", noRecord), t0, stepEnact},
		{"nudged by a pool", policy, true, enactment(avail, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Annotations = map[string]string{ippoolv1.NudgeAnnotation: "outside:10.0.0.1"}
		}), t0, stepEnact},
		{"slot asked", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0)}
		}), t0, stepWait},
		{"slot granted", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Granted: &metav1.MicroTime{Time: t0}, PolicyGeneration: 2}
		}), t0, stepApply},
		{"slot granted by an earlier policy controller (no generation)", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Granted: &metav1.MicroTime{Time: t0}}
		}), t0, stepApply},
		{"slot granted for an earlier generation: asks again", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Granted: &metav1.MicroTime{Time: t0}, PolicyGeneration: 1}
		}), t0, stepEnact},
		{"slot granted for a later generation: the cache is behind, waits for the policy", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Granted: &metav1.MicroTime{Time: t0}, PolicyGeneration: 3}
		}), t0, stepWait},
		{"waiting for the pool controller", policy, true, enactment(pend, ippoolv1.ReasonIPPoolBusy, waiting), t0.Add(5 * time.Second), stepWait},
		{"the pool controller did not serve in time", policy, true, enactment(pend, ippoolv1.ReasonIPPoolBusy, waiting), t0.Add(10 * time.Second), stepEnact},
		{"served by the pool controller", policy, true, enactment(pend, ippoolv1.ReasonIPPoolBusy, func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.WaitingForIPPool = "pool"
		}), t0.Add(time.Second), stepEnact},
		{"asked the pool controller on creation", policy, true, requested(nil), t0.Add(5 * time.Second), stepWait},
		{"asked on creation, not served in time", policy, true, requested(nil), t0.Add(10 * time.Second), stepEnact},
		{"asked on creation, served: the request asks for a slot", policy, true, requested(recorded), t0.Add(time.Second), stepWait},
		{"asked on creation, served, no slot answer in time: asks itself", policy, true, requested(recorded), t0.Add(10 * time.Second), stepEnact},
		{"slot request alone, the policy now captures from a pool: no serve to wait for", policy, true, slotRequested(nil), t0.Add(time.Second), stepEnact},
		{"asked on creation, served and granted", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			granted := metav1.NewMicroTime(t0)
			e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &granted, PolicyGeneration: 2}
			e.Status.Conditions = withConditions(nil, outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionProgressing}, t0)
		}), t0.Add(time.Second), stepApply},
		{"asked on creation, served, granted for an earlier generation: asks itself", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			granted := metav1.NewMicroTime(t0)
			e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &granted, PolicyGeneration: 1}
		}), t0.Add(time.Second), stepEnact},
		{"asked on creation, granted, but the policy now captures more", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			granted := metav1.NewMicroTime(t0)
			e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &granted}
			e.Status.Conditions = withConditions(nil, outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionProgressing}, t0)
		}), t0.Add(time.Second), stepEnact},
		{"asked on creation, then written by the handler", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.PolicyGeneration = 2
			e.Status.Conditions = withConditions(nil, outcome{condition: pend, reason: ippoolv1.ReasonIPPoolNotAvailable}, t0)
		}), t0.Add(time.Second), stepEnact},
		{"failed: try again when asked", policy, true, enactment(shared.NodeNetworkConfigurationEnactmentConditionFailing, "", nil), t0, stepEnact},
		{"retrying: waits for the backoff", policy, true, enactment(fail, ReasonRetrying, failures(3)), t0.Add(3 * time.Second), stepWait},
		{"retrying: the backoff is over", policy, true, enactment(fail, ReasonRetrying, failures(3)), t0.Add(4 * time.Second), stepEnact},
		{"retries spent: stays failed", policy, true, enactment(fail, string(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure), failures(6)), t0.Add(time.Hour), stepDone},
		{"retries spent, new generation", policy, true, enactment(fail, string(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure), func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			failures(6)(e)
			e.Status.PolicyGeneration = 1
		}), t0, stepEnact},
		{"aborted: stays aborted", policy, true, enactment(shared.NodeNetworkConfigurationEnactmentConditionAborted,
			string(shared.NodeNetworkConfigurationEnactmentConditionConfigurationAborted), nil), t0.Add(time.Hour), stepDone},
		// An abort that earlier versions wrote as a condition, on a served
		// request: the handler writes its own fields and asks for a slot
		// of this generation (answered again while the rollout is aborted).
		{"asked on creation, served, aborted by an earlier version", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			e.Status.Conditions = withConditions(nil, outcome{condition: shared.NodeNetworkConfigurationEnactmentConditionAborted,
				reason: shared.NodeNetworkConfigurationEnactmentConditionConfigurationAborted}, t0)
		}), t0.Add(time.Second), stepEnact},
		// The policy controller's answers (status.slot) are the handler's
		// to show.
		{"asked on creation, served, aborted", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			e.Status.Slot = &nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 2}}
		}), t0.Add(time.Second), stepAnswer},
		{"slot asked, aborted", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 2}}
		}), t0, stepAnswer},
		{"slot asked, aborted, the policy changed since", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.PolicyGeneration = 1
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 1}}
		}), t0, stepEnact},
		// The policy controller's cache was behind the handler's: it
		// answers the request again at this generation.
		{"slot asked at this generation, aborted at an earlier one", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 1}}
		}), t0, stepWait},
		{"asked on creation, served, aborted at an earlier generation: asks itself", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			e.Status.Slot = &nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 1}}
		}), t0.Add(time.Second), stepEnact},
		{"asked on creation, served, queued: asks itself", policy, true, requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			e.Status.Slot = &nncev1beta1.ApplySlot{Queued: &metav1.MicroTime{Time: t0}}
		}), t0.Add(time.Second), stepEnact},
		{"slot asked, queued", policy, true, enactment(prog, "", func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Queued: &metav1.MicroTime{Time: t0}}
		}), t0, stepAnswer},
		{"slot asked, queued, shown", policy, true, enactment(pend, string(shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached),
			func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
				e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Queued: &metav1.MicroTime{Time: t0}}
			}), t0, stepWait},
		{"slot asked, queued, granted", policy, true, enactment(pend, string(shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached),
			func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
				e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0), Granted: &metav1.MicroTime{Time: t0}}
			}), t0, stepApply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &scope{policy: tt.policy, enactment: tt.enactment, selected: tt.selected, captures: captures}
			if got := s.decide(tt.now, timing{busyWait: 10 * time.Second, retry: DefaultRetry}); got != tt.want {
				t.Errorf("decide = %d, want %d", got, tt.want)
			}
		})
	}

	// A policy without ippool captures: its new enactment's slot request
	// waits for the policy controller's answer, and for no longer than a
	// served one's.
	slot := func(change func(*nncev1beta1.ApplySlot)) func(*nncev1beta1.NodeNetworkConfigurationEnactment) {
		return func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{}
			change(e.Status.Slot)
		}
	}
	at := metav1.NewMicroTime(t0)
	for _, tt := range []struct {
		name      string
		enactment *nncev1beta1.NodeNetworkConfigurationEnactment
		now       time.Time
		want      step
	}{
		{"slot request", slotRequested(nil), t0.Add(time.Second), stepWait},
		{"slot request, no answer in time: asks itself", slotRequested(nil), t0.Add(10 * time.Second), stepEnact},
		{"slot request, granted", slotRequested(slot(func(s *nncev1beta1.ApplySlot) { s.Granted, s.PolicyGeneration = &at, 2 })), t0.Add(time.Second), stepApply},
		{"slot request, granted for an earlier generation: asks itself", slotRequested(slot(func(s *nncev1beta1.ApplySlot) {
			s.Granted, s.PolicyGeneration = &at, 1
		})), t0.Add(time.Second), stepEnact},
		{"slot request, granted by an earlier policy controller (no generation): asks itself", slotRequested(slot(func(s *nncev1beta1.ApplySlot) {
			s.Granted = &at
		})), t0.Add(time.Second), stepEnact},
		{"slot request, granted for a later generation: the cache is behind, waits for the policy", slotRequested(slot(func(s *nncev1beta1.ApplySlot) {
			s.Granted, s.PolicyGeneration = &at, 3
		})), t0.Add(time.Second), stepWait},
		{"slot request, queued: asks itself from its place", slotRequested(slot(func(s *nncev1beta1.ApplySlot) { s.Queued = &at })), t0.Add(time.Second), stepEnact},
		{"slot request, aborted", slotRequested(slot(func(s *nncev1beta1.ApplySlot) {
			s.Aborted = &nncev1beta1.SlotAborted{PolicyGeneration: 2}
		})), t0.Add(time.Second), stepAnswer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &scope{policy: policy, enactment: tt.enactment, selected: true}
			if got := s.decide(tt.now, timing{busyWait: 10 * time.Second, retry: DefaultRetry}); got != tt.want {
				t.Errorf("decide = %d, want %d", got, tt.want)
			}
		})
	}

	// Captures that no longer parse are reported (Failing /
	// InvalidCapture, by stepEnact), whatever a served request waits
	// for: they need no record, so the record counts as complete.
	for _, tt := range []struct {
		name      string
		enactment *nncev1beta1.NodeNetworkConfigurationEnactment
	}{
		{"asked on creation, served, captures broken", requested(recorded)},
		{"asked on creation, granted, captures broken", requested(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			recorded(e)
			granted := metav1.NewMicroTime(t0)
			e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &granted}
		})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &scope{policy: policy, enactment: tt.enactment, selected: true, captureErr: errors.New("capture addr: no such pool function")}
			if got := s.decide(t0.Add(time.Second), timing{busyWait: 10 * time.Second, retry: DefaultRetry}); got != stepEnact {
				t.Errorf("decide = %d, want %d (stepEnact)", got, stepEnact)
			}
		})
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRetryDelay(t *testing.T) {
	var got []time.Duration
	for n := int32(1); n <= 7; n++ {
		got = append(got, retryDelay(DefaultRetry, n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("retry delays = %v, want %v", got, want)
	}
}

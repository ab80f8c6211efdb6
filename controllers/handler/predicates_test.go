package handler

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// TestSpecOrIncarnationChanged: a policy's events reach the handler when
// its spec changed, and when a watch that missed its deletion shows the
// policy created again under its name as an update (same generation, new
// UID); not when only its status changed.
func TestSpecOrIncarnationChanged(t *testing.T) {
	policy := func(uid string, generation int64) *nmstatev1.NodeNetworkConfigurationPolicy {
		return &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: k8stypes.UID(uid), Generation: generation}}
	}
	p := specOrIncarnationChanged()
	for _, tt := range []struct {
		name     string
		old, new *nmstatev1.NodeNetworkConfigurationPolicy
		want     bool
	}{
		{"status only", policy("a", 1), policy("a", 1), false},
		{"spec", policy("a", 1), policy("a", 2), true},
		{"created again", policy("a", 1), policy("b", 1), true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestChangesByOthers: an enactment's events reach its handler when
// someone else changed what it acts on, not for its own writes of
// conditions.
func TestChangesByOthers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	with := func(condition shared.ConditionType, change func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "n.p"}}
		if condition != "" {
			e.Status.Conditions = withConditions(nil, outcome{condition: condition}, t0)
		}
		if change != nil {
			change(e)
		}
		return e
	}
	grant := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		g := metav1.NewMicroTime(t0)
		e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &g}
	}
	request := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		e.Status.Slot = &nncev1beta1.ApplySlot{Requested: metav1.NewMicroTime(t0)}
	}
	queue := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		q := metav1.NewMicroTime(t0)
		e.Status.Slot = &nncev1beta1.ApplySlot{Queued: &q}
	}
	abortSlot := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
		e.Status.Slot = &nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 1, Message: "m"}}
	}
	prog := shared.NodeNetworkConfigurationEnactmentConditionProgressing
	abort := shared.NodeNetworkConfigurationEnactmentConditionAborted
	pending := shared.NodeNetworkConfigurationEnactmentConditionPending
	p := changesByOthers()
	for _, tt := range []struct {
		name     string
		old, new *nncev1beta1.NodeNetworkConfigurationEnactment
		want     bool
	}{
		{"the handler's own conditions", with("", nil), with(prog, nil), false},
		{"the handler's next condition", with(abort, nil), with(prog, nil), false},
		{"a slot granted", with(prog, nil), with(prog, grant), true},
		{"the handler's request", with("", nil), with(prog, request), false},
		// Giving the slot back changes it: one reconcile finds nothing to do.
		{"the handler shows its abort", with(prog, abortSlot), with(abort, nil), true},
		{"the handler shows its queue", with(prog, queue), with(pending, queue), false},
		{"a rollout aborted", with(prog, nil), with(prog, abortSlot), true},
		{"a served request aborted", with("", nil), with("", abortSlot), true},
		{"a request queued", with(prog, nil), with(prog, queue), true},
		{"a served request queued", with("", nil), with("", queue), true},
		{"a nudge", with(prog, nil), with(prog, func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Annotations = map[string]string{ippoolv1.NudgeAnnotation: "outside:10.0.0.1"}
		}), true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

package enactmentrecord

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

func recording(pools ippoolv1.EnactmentIPPools) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
	e.Status.IPPool = pools
	return e
}

// TestSetNeverLetsAnAddressGo: whatever a new record leaves out stays in
// the enactment, releasing, for the pool controller to take back.
func TestSetNeverLetsAnAddressGo(t *testing.T) {
	for _, tt := range []struct {
		name      string
		held, set ippoolv1.EnactmentIPPools
		want      ippoolv1.EnactmentIPPools
	}{
		{"unchanged", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}}},
		{"a capture dropped", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1", "10.0.0.2"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}, Releasing: []string{"10.0.0.2"}}}},
		{"a pool dropped", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}, "b": {Allocated: []string{"10.1.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}, "b": {Allocated: []string{}, Releasing: []string{"10.1.0.1"}}}},
		{"everything dropped", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}}, nil,
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{}, Releasing: []string{"10.0.0.1"}}}},
		{"still releasing", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.3"}, Releasing: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.3"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.3"}, Releasing: []string{"10.0.0.1"}}}},
		{"released address taken again", ippoolv1.EnactmentIPPools{"a": {Allocated: []string{}, Releasing: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}},
			ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.1"}}}},
		{"nothing held, nothing set", nil, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := recording(tt.held)
			Set(e, tt.set)
			if !reflect.DeepEqual(e.Status.IPPool, tt.want) {
				t.Errorf("Set(%v) on %v = %v, want %v", tt.set, tt.held, e.Status.IPPool, tt.want)
			}
		})
	}
}

// TestAddReleasesTheReplacedAddress: a capture given a new address leaves
// its previous one releasing.
func TestAddReleasesTheReplacedAddress(t *testing.T) {
	ref := capture.Ref{Capture: "addr", Pool: "a"}
	old := capture.Address{IP: netip.MustParseAddr("10.0.0.9"), PrefixLength: 24}
	e := recording(ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.9"}}})
	e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{"addr": {State: shared.NewState(string(old.State()))}}
	Add(e, ref, capture.Address{IP: netip.MustParseAddr("10.0.0.2"), PrefixLength: 24}, shared.NodeNetworkConfigurationEnactmentMetaInfo{})
	want := ippoolv1.PoolAllocation{Allocated: []string{"10.0.0.2"}, Releasing: []string{"10.0.0.9"}}
	if got := e.Status.IPPool["a"]; !reflect.DeepEqual(got, want) {
		t.Errorf("after Add: %v, want %v", got, want)
	}
	if addr, ok := Of(e, ref); !ok || addr.IP.String() != "10.0.0.2" {
		t.Errorf("the capture records %v (%v), want 10.0.0.2", addr, ok)
	}
}

// TestRequesting: a new enactment's request lasts until its handler writes
// its own fields or the policy controller aborts it (status.slot.aborted;
// earlier versions wrote an Aborted condition); the policy controller
// queueing it for a slot does not end it. Served, it asks for a slot
// (AsksForSlot) until one is granted, queued or not.
func TestRequesting(t *testing.T) {
	with := func(change func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{ippoolv1.RequestAnnotation: "pool"}}}
		if change != nil {
			change(e)
		}
		return e
	}
	condition := func(t shared.ConditionType, reason shared.ConditionReason) func(*nncev1beta1.NodeNetworkConfigurationEnactment) {
		return func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Conditions = shared.ConditionList{
				{Type: shared.NodeNetworkConfigurationEnactmentConditionAvailable, Status: corev1.ConditionFalse},
				{Type: t, Status: corev1.ConditionTrue, Reason: reason},
			}
		}
	}
	for _, tc := range []struct {
		name string
		e    *nncev1beta1.NodeNetworkConfigurationEnactment
		want bool
	}{
		{"created", with(nil), true},
		{"no request", with(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) { e.Annotations = nil }), false},
		{"queued for a slot", with(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Queued: &metav1.MicroTime{}}
		}), true},
		{"aborted", with(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 1}}
		}), false},
		{"queued for a slot by an earlier version", with(condition(shared.NodeNetworkConfigurationEnactmentConditionPending,
			shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached)), true},
		{"aborted by an earlier version", with(condition(shared.NodeNetworkConfigurationEnactmentConditionAborted,
			shared.NodeNetworkConfigurationEnactmentConditionConfigurationAborted)), false},
		{"pending for another reason, by its handler", with(condition(shared.NodeNetworkConfigurationEnactmentConditionPending,
			ippoolv1.ReasonIPPoolBusy)), false},
		{"written by its handler", with(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) { e.Status.PolicyGeneration = 1 }), false},
		{"being deleted", with(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			now := metav1.Now()
			e.DeletionTimestamp = &now
		}), false},
	} {
		if got := Requesting(tc.e); got != tc.want {
			t.Errorf("%s: Requesting = %v, want %v", tc.name, got, tc.want)
		}
	}

	refs := []capture.Ref{{Pool: "pool", Capture: "addr"}}
	served := func(slot *nncev1beta1.ApplySlot) *nncev1beta1.NodeNetworkConfigurationEnactment {
		return with(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.IPPool = ippoolv1.EnactmentIPPools{"pool": {Allocated: []string{"10.0.0.1"}}}
			addr := capture.Address{IP: netip.MustParseAddr("10.0.0.1"), PrefixLength: 24}
			e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{
				"addr": {State: shared.NewState(string(addr.State()))}}
			e.Status.Slot = slot
		})
	}
	granted := metav1.NewMicroTime(time.Now())
	for _, tc := range []struct {
		name string
		e    *nncev1beta1.NodeNetworkConfigurationEnactment
		want bool
	}{
		{"not served yet", with(nil), false},
		{"served", served(nil), true},
		{"served, queued", served(&nncev1beta1.ApplySlot{Queued: &granted}), true},
		{"served, granted", served(&nncev1beta1.ApplySlot{Granted: &granted}), false},
		{"served, aborted", served(&nncev1beta1.ApplySlot{Aborted: &nncev1beta1.SlotAborted{PolicyGeneration: 1}}), false},
		{"served, queued, asked by its handler", served(&nncev1beta1.ApplySlot{Requested: granted, Queued: &granted}), false},
	} {
		if got := AsksForSlot(tc.e, refs); got != tc.want {
			t.Errorf("%s: AsksForSlot = %v, want %v", tc.name, got, tc.want)
		}
	}

	// A slot request alone (a policy without ippool captures) asks the
	// policy controller at once, and the pool controller for nothing.
	slotOnly := func(change func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := with(change)
		e.Annotations = map[string]string{ippoolv1.SlotRequestAnnotation: "true"}
		return e
	}
	for _, tc := range []struct {
		name                             string
		e                                *nncev1beta1.NodeNetworkConfigurationEnactment
		refs                             []capture.Ref
		requesting, addresses, asks, got bool
	}{
		{"slot request", slotOnly(nil), nil, true, false, true, false},
		{"slot request, the policy now captures from a pool", slotOnly(nil), refs, true, false, false, false},
		{"slot request, queued", slotOnly(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Queued: &granted}
		}), nil, true, false, true, false},
		{"slot request, granted", slotOnly(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &granted, PolicyGeneration: 1}
		}), nil, true, false, false, true},
		{"slot request, written by its handler", slotOnly(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.PolicyGeneration = 1
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: granted, Granted: &granted}
		}), nil, false, false, false, false},
		{"address request", with(nil), refs, true, true, false, false},
	} {
		if got := Requesting(tc.e); got != tc.requesting {
			t.Errorf("%s: Requesting = %v, want %v", tc.name, got, tc.requesting)
		}
		if got := RequestsAddresses(tc.e); got != tc.addresses {
			t.Errorf("%s: RequestsAddresses = %v, want %v", tc.name, got, tc.addresses)
		}
		if got := AsksForSlot(tc.e, tc.refs); got != tc.asks {
			t.Errorf("%s: AsksForSlot = %v, want %v", tc.name, got, tc.asks)
		}
		if got := GrantedOnRequest(tc.e, 1); got != tc.got {
			t.Errorf("%s: GrantedOnRequest = %v, want %v", tc.name, got, tc.got)
		}
		if got := GrantedForEarlier(tc.e, 1); got {
			t.Errorf("%s: GrantedForEarlier = true, want false", tc.name)
		}
	}

	// A grant names the generation it was given for: one for another (the
	// policy changed since the grant), or for none (a policy controller of
	// an earlier version), is answered and not to be applied.
	for _, tc := range []struct {
		name    string
		granted int64
	}{{"granted for an earlier generation", 1}, {"granted for no generation", 0}} {
		e := slotOnly(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Status.Slot = &nncev1beta1.ApplySlot{Granted: &granted, PolicyGeneration: tc.granted}
		})
		if GrantedOnRequest(e, 2) || !GrantedForEarlier(e, 2) {
			t.Errorf("%s: GrantedOnRequest = %v, GrantedForEarlier = %v at generation 2, want false, true",
				tc.name, GrantedOnRequest(e, 2), GrantedForEarlier(e, 2))
		}
		if GrantedForEarlier(e, tc.granted) {
			t.Errorf("%s: GrantedForEarlier at the granted generation = true, want false", tc.name)
		}
		if AsksForSlot(e, nil) {
			t.Errorf("%s: AsksForSlot = true, want false: the policy controller answered it", tc.name)
		}
	}
}

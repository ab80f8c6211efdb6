package companion

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// TestEnactedAt: a node whose handler is applying its generated policy
// holds a slot of the pooled policy's maxUnavailable even when it is not
// Ready, including a new enactment granted on its creation's request,
// which writes its generation only with its outcome.
func TestEnactedAt(t *testing.T) {
	now := metav1.NewMicroTime(metav1.Now().Time)
	requested := func(annotation string, slot *nncev1beta1.ApplySlot, generation int64) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{annotation: "true"}}}
		e.Status.Slot, e.Status.PolicyGeneration = slot, generation
		return e
	}
	for _, tc := range []struct {
		name string
		e    *nncev1beta1.NodeNetworkConfigurationEnactment
		want bool
	}{
		{"no enactment", nil, false},
		{"written at the generation", requested("other", nil, 2), true},
		{"written at an earlier generation", requested("other", nil, 1), false},
		{"created with a slot request, not answered", requested(ippoolv1.SlotRequestAnnotation, nil, 0), false},
		{"created with a slot request, queued", requested(ippoolv1.SlotRequestAnnotation, &nncev1beta1.ApplySlot{Queued: &now}, 0), false},
		{"created with a slot request, granted: applying", requested(ippoolv1.SlotRequestAnnotation, &nncev1beta1.ApplySlot{Granted: &now, PolicyGeneration: 2}, 0), true},
		{"created with a slot request, granted for an earlier generation", requested(ippoolv1.SlotRequestAnnotation,
			&nncev1beta1.ApplySlot{Granted: &now, PolicyGeneration: 1}, 0), false},
		{"created by kubernetes-nmstate's handler, not written yet", requested("other", nil, 0), false},
	} {
		if got := enactedAt(tc.e, 2); got != tc.want {
			t.Errorf("%s: enactedAt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

package handler

import (
	"testing"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
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

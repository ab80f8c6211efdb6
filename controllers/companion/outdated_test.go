package companion

import (
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// TestOutdated: an enactment's state is its policy's when the API server
// wrote it after the policy was created, whatever the clock of the node
// that set its conditions says; one written before is an earlier policy's
// of the same name.
func TestOutdated(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	g := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", CreationTimestamp: metav1.NewTime(created)}}
	enactment := func(nodeClock time.Time, written ...time.Time) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
		e.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationEnactmentConditionAvailable,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(nodeClock)}}
		// The handler's metadata write at creation, then its status writes.
		e.ManagedFields = append(e.ManagedFields, metav1.ManagedFieldsEntry{Manager: "handler", Operation: metav1.ManagedFieldsOperationUpdate,
			Time: &metav1.Time{Time: created.Add(time.Hour)}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{}}}`)}})
		for _, at := range written {
			e.ManagedFields = append(e.ManagedFields, metav1.ManagedFieldsEntry{Manager: "handler", Operation: metav1.ManagedFieldsOperationUpdate,
				Subresource: "status", Time: &metav1.Time{Time: at}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{}}}`)}})
		}
		return e
	}
	// nested adds a later update, through the main resource, of a field
	// named status that is not the object's.
	nested := func(e *nncev1beta1.NodeNetworkConfigurationEnactment) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e.ManagedFields = append(e.ManagedFields, metav1.ManagedFieldsEntry{Manager: "other", Operation: metav1.ManagedFieldsOperationUpdate,
			Time: &metav1.Time{Time: created.Add(time.Minute)}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:status":{}}}}`)}})
		return e
	}
	for _, tc := range []struct {
		name string
		e    *nncev1beta1.NodeNetworkConfigurationEnactment
		want bool
	}{
		{"written after, by a node an hour behind", enactment(created.Add(-time.Hour+5*time.Second), created.Add(5*time.Second)), false},
		{"written before, by a node an hour ahead", enactment(created.Add(time.Hour-5*time.Second), created.Add(-5*time.Second)), true},
		{"written before and after: the last write counts", enactment(created.Add(-time.Hour), created.Add(-time.Minute), created.Add(time.Second)), false},
		{"written in the second the policy was created", enactment(created.Add(-time.Hour), created), false},
		{"no status write on record: the node's clock", enactment(created.Add(-time.Minute)), true},
		{"written before; a later write of a nested field named status is not one", nested(enactment(created.Add(time.Hour), created.Add(-time.Minute))), true},
	} {
		if got := outdated(tc.e, g); got != tc.want {
			t.Errorf("%s: outdated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFailedSince: a removal's retry backoff runs from when the API server
// wrote the failure, not from the time the node's clock put on it.
func TestFailedSince(t *testing.T) {
	written := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
	e.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationEnactmentConditionFailing,
		Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(written.Add(time.Hour))}}
	if got := failedSince(e); !got.Equal(written.Add(time.Hour)) {
		t.Errorf("with no status write on record: failedSince = %s, want the condition's %s", got, written.Add(time.Hour))
	}
	e.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "handler", Operation: metav1.ManagedFieldsOperationUpdate,
		Subresource: "status", Time: &metav1.Time{Time: written}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{}}}`)}}}
	if got := failedSince(e); !got.Equal(written) {
		t.Errorf("failedSince = %s, want the write's %s (the node's clock is an hour ahead)", got, written)
	}
}

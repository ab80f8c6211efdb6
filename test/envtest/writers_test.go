package envtest

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPartsOf: a leaf ({} in managedFields) is a part; an empty struct,
// which looks the same there, is not; a split field counts field by field,
// a split map by its entries' fields, once each, whatever the entry (an
// empty list sets nothing); only the project's metadata keys count.
func TestPartsOf(t *testing.T) {
	mf := metav1.ManagedFieldsEntry{Manager: "m", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{
		"f:metadata":{"f:finalizers":{".":{},"v:\"nmstate.io/ippool\"":{}},"f:annotations":{"f:other.io/x":{},"f:nmstate.io/ippool-nudge":{}}},
		"f:status":{"f:slot":{".":{},"f:granted":{}},"f:policyGeneration":{},"f:desiredStateMetaInfo":{},"f:conditions":{},
			"f:ippool":{".":{},"f:a":{".":{},"f:allocated":{},"f:releasing":{}},"f:b":{".":{},"f:releasing":{}}}}}`)}}
	values := map[string]any{"status": map[string]any{
		"ippool": map[string]any{"a": map[string]any{"allocated": []any{"10.0.0.1"}, "releasing": []any{}},
			"b": map[string]any{"releasing": []any{"10.1.0.1"}}},
		"slot":                 map[string]any{"granted": "2026-11-28T09:00:00.000000Z"},
		"policyGeneration":     int64(2),
		"desiredStateMetaInfo": map[string]any{"time": nil},
		"conditions":           []any{},
	}}
	got, err := PartsOf(mf, values, "slot", "ippool[*]")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"annotation nmstate.io/ippool-nudge", "finalizer nmstate.io/ippool",
		"status.ippool[*].allocated", "status.ippool[*].releasing", "status.policyGeneration", "status.slot.granted"}
	if !slices.Equal(got, want) {
		t.Errorf("PartsOf = %v, want %v", got, want)
	}
}

// TestWritersTable: the enactment table of docs/protocol.md is read with
// each part's setters, not the writers that only remove or clear it.
func TestWritersTable(t *testing.T) {
	table, err := WritersTable("part of an enactment", "handler", "pool controller", "policy controller", "admin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		part, writer string
		sets         bool
	}{
		{"status.ippool[*].allocated", "handler", true},
		{"status.ippool[*].allocated", "pool controller", true},
		{"status.ippool[*].releasing", "handler", true},
		{"status.ippool[*].releasing", "pool controller", true}, // for an address it replaced
		{"status.slot.granted", "policy controller", true},
		{"status.slot.granted", "handler", false}, // it clears the slot
		{"annotation nmstate.io/ippool-nudge", "pool controller", true},
		{"annotation nmstate.io/ippool-nudge", "handler", false}, // it removes it
		{"annotation nmstate.io/reset-ippool", "admin", true},
		{"annotation nmstate.io/reset-ippool", "pool controller", false},
		{"finalizer nmstate.io/ippool", "handler", true},
		{"finalizer nmstate.io/ippool", "pool controller", false},
	} {
		if got := table[tc.part][tc.writer]; got != tc.sets {
			t.Errorf("%s sets %s: %v, want %v", tc.writer, tc.part, got, tc.sets)
		}
	}
}

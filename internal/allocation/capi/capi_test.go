package capi

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestServed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string
		want     string
	}{
		{"no CRDs: off", nil, ""},
		{"Cluster API 1.11 and later", []string{"v1beta1", "v1beta2"}, "v1beta2"},
		{"Cluster API up to 1.10", []string{"v1alpha1", "v1beta1"}, "v1beta1"},
		{"only v1alpha1: off", []string{"v1alpha1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := meta.NewDefaultRESTMapper(nil)
			for _, v := range tc.versions {
				for _, kind := range []string{ClaimKind, AddressKind} {
					m.Add(schema.GroupVersionKind{Group: Group, Version: v, Kind: kind}, meta.RESTScopeNamespace)
				}
			}
			got, served, err := Served(m)
			if err != nil || got != tc.want || served != (tc.want != "") {
				t.Errorf("Served = %q, %v, %v; want %q", got, served, err, tc.want)
			}
		})
	}
}

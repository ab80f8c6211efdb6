package capi

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

func TestRecords(t *testing.T) {
	address := func(name, claim, group, kind, pool, ip string) unstructured.Unstructured {
		u := NewAddress("v1beta2")
		u.SetNamespace("ns")
		u.SetName(name)
		u.Object["spec"] = map[string]any{"address": ip, "prefix": int64(24), "claimRef": map[string]any{"name": claim},
			"poolRef": map[string]any{"apiGroup": group, "kind": kind, "name": pool}}
		return *u
	}
	got := recordsOf([]unstructured.Unstructured{
		address("a", "a", "nmstate.io", "NodeIPPool", "p", "10.0.0.1"),
		address("b", "b", "ipam.cluster.x-k8s.io", "InClusterIPPool", "p", "10.0.0.2"), // another provider's
		address("c", "c", "nmstate.io", "NodeIPPool", "p", "not-an-ip"),
		address("d", "x", "nmstate.io", "NodeIPPool", "p", "10.0.0.4"), // not recognized
	}, func(u *unstructured.Unstructured) bool { return u.GetName() != "d" })
	if len(got) != 2 || got[0].Name != "IPAddressClaim/ns/a" || got[0].Status.IPPool["p"].Allocated[0] != "10.0.0.1" {
		t.Errorf("records = %+v, want one of IPAddressClaim/ns/a holding 10.0.0.1 from p", got)
	}
	if len(got) == 2 && (got[1].Name != "IPAddress/ns/d" || got[1].Status.IPPool["p"].Allocated[0] != "10.0.0.4") {
		t.Errorf("records = %+v, want the unrecognized IPAddress ns/d as IPAddress/ns/d holding 10.0.0.4 from p", got)
	}
}

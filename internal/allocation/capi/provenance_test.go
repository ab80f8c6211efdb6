package capi

import (
	"bytes"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// signedAddress is the IPAddress ns/a of claim a, holding ip of pool p,
// controlled by the claim whose UID is uid and signed for it by s.
func signedAddress(s *Signer, ip string, uid types.UID) *unstructured.Unstructured {
	u := NewAddress("v1beta2")
	u.SetNamespace("ns")
	u.SetName("a")
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: Group + "/v1beta2", Kind: ClaimKind, Name: "a", UID: uid,
		Controller: ptr.To(true)}})
	u.Object["spec"] = map[string]any{"address": ip, "prefix": int64(24), "claimRef": map[string]any{"name": "a"},
		"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "p"}}
	s.SetProvenance(u, uid)
	return u
}

func TestSigned(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	s, err := NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSigner(bytes.Repeat([]byte{8}, 32))
	const uid = types.UID("uid-1")
	for _, tc := range []struct {
		name   string
		change func(u *unstructured.Unstructured)
		uid    types.UID // the live claim's
		want   bool
	}{
		{"as made", func(*unstructured.Unstructured) {}, uid, true},
		{"its claim is another (created again after the first went)", func(*unstructured.Unstructured) {}, "uid-2", false},
		{"no claim has it", func(*unstructured.Unstructured) {}, "", false},
		{"moved to another address", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "10.0.0.9", "spec", "address")
		}, uid, false},
		{"moved to another pool", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "q", "spec", "poolRef", "name")
		}, uid, false},
		{"copied into another namespace", func(u *unstructured.Unstructured) { u.SetNamespace("tenant") }, uid, false},
		{"copied under another name", func(u *unstructured.Unstructured) { u.SetName("b") }, uid, false},
		{"its owner reference dropped (a backup restored)", func(u *unstructured.Unstructured) { u.SetOwnerReferences(nil) }, uid, false},
		{"owned by another kind", func(u *unstructured.Unstructured) {
			refs := u.GetOwnerReferences()
			refs[0].Kind = "Machine"
			u.SetOwnerReferences(refs)
		}, uid, false},
		{"signed with another key", func(u *unstructured.Unstructured) { other.SetProvenance(u, uid) }, uid, false},
		{"signature removed", func(u *unstructured.Unstructured) { u.SetAnnotations(nil) }, uid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := signedAddress(s, "10.0.0.1", uid)
			tc.change(u)
			if got := s.Signed(u, tc.uid); got != tc.want {
				t.Errorf("Signed = %v, want %v", got, tc.want)
			}
		})
	}
	var none *Signer
	if !none.Signed(NewAddress("v1beta2"), "") {
		t.Error("a nil signer must recognize every IPAddress")
	}
	if _, err := NewSigner(key[:16]); err == nil {
		t.Error("NewSigner accepted a 16-byte key")
	}
}

package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestClaimsInShowAndCheck: show lists a Cluster API claim's address with
// the claim, check counts it as a record (its bit set: agreed; its bit
// cleared: missing, naming the claim).
func TestClaimsInShowAndCheck(t *testing.T) {
	k, kubeconfig := cluster(t, envtest.WithClusterAPI())
	ctx := context.Background()
	pool(t, k, "prov", ippoolv1.IPRange{CIDR: "192.0.2.0/24", Start: "192.0.2.10", End: "192.0.2.20"}, "192.0.2.10")
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-a"}}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct{ name, ip string }{{"m1-eth0-0", "192.0.2.10"}, {"m2-eth0-0", "192.0.2.11"}} {
		u := capi.NewAddress("v1beta2")
		u.SetNamespace("cluster-a")
		u.SetName(a.name)
		u.Object["spec"] = map[string]any{"address": a.ip, "prefix": int64(24), "claimRef": map[string]any{"name": a.name},
			"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "prov"}}
		if err := k.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := plugin(kubeconfig, "show", "prov")
	if code != 0 || !strings.Contains(out, "IPAddressClaim cluster-a/m1-eth0-0") {
		t.Errorf("show: exit %d, want the claim as holder:\n%s%s", code, out, errOut)
	}
	code, out, _ = plugin(kubeconfig, "check")
	if code != 1 || !strings.Contains(out, "192.0.2.11 (offset 1) is recorded by IPAddressClaim cluster-a/m2-eth0-0 but not set") ||
		strings.Contains(out, "192.0.2.10 ") {
		t.Errorf("check: exit %d, want only 192.0.2.11 (recorded by claim m2, not set) reported:\n%s", code, out)
	}
}

// TestCheckCountsNoForeignIPAddress: once the provider's signing key
// exists, an IPAddress it did not sign (made by hand, or by another
// provider naming this pool) records nothing: an address a node carries
// that only such an IPAddress names is noted as recorded by no holder,
// as the pool's audit counts it, while a signed one's claim is a record.
func TestCheckCountsNoForeignIPAddress(t *testing.T) {
	k, kubeconfig := cluster(t, envtest.WithClusterAPI())
	ctx := context.Background()
	pool(t, k, "foreign", ippoolv1.IPRange{CIDR: "192.0.2.0/24", Start: "192.0.2.10", End: "192.0.2.20"}, "192.0.2.10", "192.0.2.11")
	for _, ns := range []string{"cluster-a", "nmstate"} {
		if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	if err := k.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: capi.DefaultKeySecret, Namespace: "nmstate",
		Labels: map[string]string{"app.kubernetes.io/part-of": "nmstate-ippool"}}, Data: map[string][]byte{capi.KeySecretKey: key}}); err != nil {
		t.Fatal(err)
	}
	signer, err := capi.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	var claimUID types.UID
	for _, a := range []struct {
		name, ip string
		signed   bool
	}{{"by-hand", "192.0.2.10", false}, {"m1-eth0-0", "192.0.2.11", true}} {
		if a.signed {
			claim := capi.NewClaim("v1beta2")
			claim.SetNamespace("cluster-a")
			claim.SetName(a.name)
			claim.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "foreign"}}
			if err := k.Create(ctx, claim); err != nil {
				t.Fatal(err)
			}
			claimUID = claim.GetUID()
		}
		u := capi.NewAddress("v1beta2")
		u.SetNamespace("cluster-a")
		u.SetName(a.name)
		u.Object["spec"] = map[string]any{"address": a.ip, "prefix": int64(24), "claimRef": map[string]any{"name": a.name},
			"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": "foreign"}}
		if a.signed {
			controller := true
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: capi.Group + "/v1beta2", Kind: capi.ClaimKind, Name: a.name,
				UID: claimUID, Controller: &controller}})
			signer.SetProvenance(u, claimUID)
		}
		if err := k.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	carrier(t, k, "for01", "worker", "192.0.2.10")

	code, out, errOut := plugin(kubeconfig, "check", "foreign")
	want := "NOTE      foreign: 192.0.2.10 is on node for01's network and recorded by no holder"
	if !strings.Contains(out, want) || strings.Contains(out, "192.0.2.11 (offset 1) is recorded by") {
		t.Errorf("check: exit %d, want %q, and the signed claim's address as recorded:\n%s%s", code, want, out, errOut)
	}
}

package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

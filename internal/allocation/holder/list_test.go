package holder

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// TestAddressRecords: an IPAddress of a NodeIPPool is its claim's record,
// or, not recognized, the record of the IPAddress itself; another
// provider's, or one naming no address, is none.
func TestAddressRecords(t *testing.T) {
	address := func(name, claim, group, kind, pool, ip string) unstructured.Unstructured {
		u := capi.NewAddress("v1beta2")
		u.SetNamespace("ns")
		u.SetName(name)
		u.Object["spec"] = map[string]any{"address": ip, "prefix": int64(24), "claimRef": map[string]any{"name": claim},
			"poolRef": map[string]any{"apiGroup": group, "kind": kind, "name": pool}}
		return *u
	}
	got := addressRecords([]unstructured.Unstructured{
		address("a", "a", "nmstate.io", "NodeIPPool", "p", "10.0.0.1"),
		address("b", "b", "ipam.cluster.x-k8s.io", "InClusterIPPool", "p", "10.0.0.2"), // another provider's
		address("c", "c", "nmstate.io", "NodeIPPool", "p", "not-an-ip"),
		address("d", "x", "nmstate.io", "NodeIPPool", "p", "10.0.0.4"), // not recognized
	}, func(u *unstructured.Unstructured) bool { return u.GetName() != "d" })
	if len(got) != 2 || got[0].Holder != ForClaim("ns", "a") || got[0].Pools["p"].Allocated[0] != "10.0.0.1" || got[0].Node != "" {
		t.Fatalf("records = %+v, want the claim ns/a holding 10.0.0.1 from p", got)
	}
	if got[1].Holder != ForIPAddress("ns", "d") || got[1].Pools["p"].Allocated[0] != "10.0.0.4" {
		t.Errorf("records = %+v, want the unrecognized IPAddress ns/d holding 10.0.0.4 from p", got)
	}
}

package companion

import (
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
)

// TestRecordsOf: each node of a pooled policy that holds addresses is one
// record, named so that no enactment can be, with the node and the policy
// in kubernetes-nmstate's labels and the capture of each address; the
// pool's claims describe it by node and policy.
func TestRecordsOf(t *testing.T) {
	p := ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "storage"}}
	p.Status.Nodes = []ippoolv1.PooledPolicyNode{
		{Node: "w1.example.com", Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "p", IP: "10.0.0.10"}}},
		{Node: "w2", Released: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "p", IP: "10.0.0.11"}}},
		{Node: "w3"},
	}
	records := RecordsOf([]ippoolv1.PooledNodeNetworkConfigurationPolicy{p})
	if len(records) != 2 {
		t.Fatalf("%d records, want 2 (w3 holds nothing)", len(records))
	}
	e := records[0]
	if e.Name != "PooledNodeNetworkConfigurationPolicy/storage/w1.example.com" ||
		e.Labels[shared.EnactmentNodeLabel] != "w1.example.com" || e.Labels[shared.EnactmentPolicyLabel] != "storage" {
		t.Errorf("record %s %v", e.Name, e.Labels)
	}
	if h := holder.Parse(e.Name); h != holder.ForPolicyNode("storage", "w1.example.com") || !h.Foreign() {
		t.Errorf("holder.Parse(%q) = %+v", e.Name, h)
	}
	claims := poolstatus.ClaimsOf("p", nil, records)
	for ip, want := range map[string]string{
		"10.0.0.10": "node w1.example.com and capture addr (PooledNodeNetworkConfigurationPolicy storage)",
		"10.0.0.11": "node w2 (PooledNodeNetworkConfigurationPolicy storage)",
	} {
		var got string
		for addr, owners := range claims {
			if addr.String() == ip {
				got = owners[0].Describe("p")
			}
		}
		if got != want {
			t.Errorf("%s is held by %q, want %q", ip, got, want)
		}
	}
	if remedy := claims.Addrs(); len(remedy) != 2 {
		t.Fatalf("claims %v", claims)
	}
	if got := claims[claims.Addrs()[0]][0].Remedy("p"); got != "kubectl annotate nncp storage-w1.example.com nmstate.io/reset-ippool=p" {
		t.Errorf("remedy %q", got)
	}
}

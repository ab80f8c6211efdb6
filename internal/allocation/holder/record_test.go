package holder_test

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// TestPooledPolicyRecords: each node of a pooled policy that holds
// addresses is one record, of its own kind, with its node, its policy and
// the capture of each address; a node taking an address off still holds
// it; the pool's claims describe it by node and policy and tell how to
// take the address from it.
func TestPooledPolicyRecords(t *testing.T) {
	p := ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "storage"}}
	p.Status.Nodes = []ippoolv1.PooledPolicyNode{
		{Node: "w1.example.com", Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "p", IP: "10.0.0.10"}}},
		{Node: "w2", Released: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "p", IP: "10.0.0.11"}}},
		{Node: "w3"},
	}
	records := holder.OfPooledPolicies([]ippoolv1.PooledNodeNetworkConfigurationPolicy{p})
	if len(records) != 2 {
		t.Fatalf("%d records, want 2 (w3 holds nothing)", len(records))
	}
	r := records[0]
	if r.Holder != holder.ForPolicyNode("storage", "w1.example.com") || r.Node != "w1.example.com" || r.Policy != "storage" ||
		r.Enactment != nil || !r.Holder.Foreign() {
		t.Errorf("record %+v", r)
	}
	if ip, ok := r.For(capture.Ref{Capture: "addr", Pool: "p"}); !ok || ip != netip.MustParseAddr("10.0.0.10") {
		t.Errorf("w1's address for capture addr of p: %v %v", ip, ok)
	}
	if _, ok := records[1].For(capture.Ref{Capture: "addr", Pool: "p"}); ok {
		t.Error("w2 is taking its address off: it holds it, but no longer for its capture")
	}
	claims := poolstatus.OwnersOf("p", nil, records)
	for ip, want := range map[string]string{
		"10.0.0.10": "node w1.example.com and capture addr (PooledNodeNetworkConfigurationPolicy storage)",
		"10.0.0.11": "node w2 (PooledNodeNetworkConfigurationPolicy storage)",
	} {
		owners := claims[netip.MustParseAddr(ip)]
		if len(owners) != 1 || owners[0].Describe("p") != want {
			t.Errorf("%s is held by %+v, want %q", ip, owners, want)
		}
	}
	if got := claims[netip.MustParseAddr("10.0.0.10")][0].Remedy("p"); got != "kubectl annotate nncp storage-w1.example.com nmstate.io/reset-ippool=p" {
		t.Errorf("remedy %q", got)
	}
}

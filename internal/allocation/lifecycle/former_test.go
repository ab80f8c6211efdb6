package lifecycle

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// template puts the address of the capture addr on eth1.
const template = `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
`

// TestFormers builds the Former of each kind of holder from the record
// that kind keeps, and checks what its quarantines will say: the holder,
// the node whose evidence lifts them, the capture that keeps each address
// for the holder's return (none without return, none for a claim), the
// interface of each, and the addresses.
func TestFormers(t *testing.T) {
	addr := capture.Address{IP: netip.MustParseAddr("10.9.0.4"), PrefixLength: 24}
	enactment := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "node01.p",
		Labels: map[string]string{shared.EnactmentNodeLabel: "node01", shared.EnactmentPolicyLabel: "p"},
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: "node02", UID: "other"},
			{APIVersion: "v1", Kind: "Node", Name: "node01", UID: "uid01"},
		}}}
	enactment.Status.IPPool = ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.9.0.4"}, Releasing: []string{"10.9.0.3"}}}
	enactment.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{
		"addr": {State: shared.NewState(string(addr.State()))}}
	enactment.Status.DesiredState = shared.NewState("interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: 10.9.0.4\n      prefix-length: 24\n")

	policy := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pp"}}
	policy.Spec.DesiredState = shared.NewState(template)
	rec := &ippoolv1.PooledPolicyNode{Node: "node03", NodeUID: "uid03",
		Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "a", IP: "10.9.0.5"}},
		Released:  []ippoolv1.PooledAddress{{Capture: "addr", Pool: "b", IP: "10.8.0.5"}}}

	claim := holder.ForClaim("ns", "c1")

	for _, tc := range []struct {
		name   string
		former Former
		want   poolwrite.Holder
		record ippoolv1.EnactmentIPPools
	}{{
		name:   "enactment",
		former: OfEnactment(enactment),
		want: poolwrite.Holder{Node: "node01", NodeUID: "uid01", Ref: holder.ForEnactment("node01.p"),
			Captures: map[string]string{"10.9.0.4": "addr"}, Interfaces: map[string]string{"10.9.0.4": "eth1"}},
		record: enactment.Status.IPPool,
	}, {
		name:   "enactment, a reset's part",
		former: OfEnactment(enactment).Only(ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.9.0.4"}}}).WithoutReturn(),
		want: poolwrite.Holder{Node: "node01", NodeUID: "uid01", Ref: holder.ForEnactment("node01.p"),
			Interfaces: map[string]string{"10.9.0.4": "eth1"}},
		record: ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.9.0.4"}}},
	}, {
		name:   "pooled policy node, everything it holds",
		former: OfPolicyNode(policy, rec, rec.Held()),
		want: poolwrite.Holder{Node: "node03", NodeUID: "uid03", Ref: holder.ForPolicyNode("pp", "node03"),
			Captures:   map[string]string{"10.9.0.5": "addr", "10.8.0.5": "addr"},
			Interfaces: map[string]string{"10.9.0.5": "eth1", "10.8.0.5": "eth1"}},
		record: ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.9.0.5"}}, "b": {Allocated: []string{"10.8.0.5"}}},
	}, {
		name:   "pooled policy node, replaced addresses",
		former: OfPolicyNode(policy, rec, rec.Released).WithoutReturn(),
		want: poolwrite.Holder{Node: "node03", NodeUID: "uid03", Ref: holder.ForPolicyNode("pp", "node03"),
			Interfaces: map[string]string{"10.8.0.5": "eth1"}},
		record: ippoolv1.EnactmentIPPools{"b": {Allocated: []string{"10.8.0.5"}}},
	}, {
		name:   "claim whose machine joined",
		former: OfClaim(claim, "node04", "a", netip.MustParseAddr("10.9.0.6")),
		want:   poolwrite.Holder{Node: "node04", Ref: claim},
		record: ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.9.0.6"}}},
	}, {
		name:   "claim no node carries",
		former: OfClaim(claim, "", "a", netip.MustParseAddr("10.9.0.6")),
		want:   poolwrite.Holder{Ref: claim},
		record: ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.9.0.6"}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.former.holder); diff != "" {
				t.Errorf("holder (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.record, tc.former.Record()); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			if tc.former.Holder() != tc.want.Ref || tc.former.Node() != tc.want.Node {
				t.Errorf("Holder(), Node() = %v, %q; want %v, %q", tc.former.Holder(), tc.former.Node(), tc.want.Ref, tc.want.Node)
			}
		})
	}
}

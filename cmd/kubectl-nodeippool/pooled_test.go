package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestPooledPoliciesInShowCheckAndPlan: show lists a pooled policy's
// addresses with their node and policy (companion mode), check counts
// them as records, and plan of the pooled policy says each node holds its
// address.
func TestPooledPoliciesInShowCheckAndPlan(t *testing.T) {
	k, kubeconfig := cluster(t)
	ctx := context.Background()
	pool(t, k, "comp", ippoolv1.IPRange{CIDR: "192.0.2.0/24", Start: "192.0.2.10", End: "192.0.2.20"}, "192.0.2.10")
	for _, n := range []string{"w1", "w2"} {
		if err := k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"role": "w"}}}); err != nil {
			t.Fatal(err)
		}
	}
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "storage"}}
	p.Spec.NodeSelector = map[string]string{"role": "w"}
	p.Spec.Capture = map[string]string{"addr": "ippool.comp.allocate"}
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Nodes = []ippoolv1.PooledPolicyNode{
		{Node: "w1", Policy: "storage-w1", Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "comp", IP: "192.0.2.10"}}},
		{Node: "w2", Policy: "storage-w2", Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "comp", IP: "192.0.2.11"}}},
	}
	if err := k.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := plugin(kubeconfig, "show", "comp")
	if code != 0 || !strings.Contains(out, "pnncp/storage") || !strings.Contains(out, "w1") {
		t.Errorf("show: exit %d, want w1 and pnncp/storage as holder:\n%s%s", code, out, errOut)
	}
	code, out, _ = plugin(kubeconfig, "check")
	if code != 1 || !strings.Contains(out, "192.0.2.11 (offset 1) is recorded by node w2 (PooledNodeNetworkConfigurationPolicy storage) but not set") ||
		strings.Contains(out, "192.0.2.10 ") {
		t.Errorf("check: exit %d, want only 192.0.2.11 (recorded for w2, not set) reported:\n%s", code, out)
	}
	file := writeFile(t, `apiVersion: nmstate.io/v1
kind: PooledNodeNetworkConfigurationPolicy
metadata: {name: storage}
spec:
  nodeSelector: {role: w}
  capture: {addr: ippool.comp.allocate}
  desiredState:
    interfaces:
    - name: eth1
      type: ethernet
      state: up
      ipv4:
        enabled: true
        address:
        - ip: "{{ capture.addr.ip }}"
          prefix-length: "{{ capture.addr.prefix-length }}"
`)
	code, out, errOut = plugin(kubeconfig, "plan", "-f", file, "-o", "json")
	if code != 0 || strings.Count(out, `"verdict": "holds"`) != 2 || !strings.Contains(out, `"ip": "192.0.2.11"`) {
		t.Errorf("plan: exit %d, want both nodes holding their addresses:\n%s%s", code, out, errOut)
	}
}

package v1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNodePolicyName: a generated policy's name is "<policy>-<node>" when
// it fits a label value, and otherwise a prefix and a hash of the whole,
// within 63 characters, a valid name, and distinct for distinct nodes.
func TestNodePolicyName(t *testing.T) {
	long := strings.Repeat("worker-", 10) + "01.example.com"
	tests := []struct{ policy, node, want string }{
		{"static-ip", "node01", "static-ip-node01"},
		{"static-ip", "node01.example.com", "static-ip-node01.example.com"},
	}
	for _, tt := range tests {
		if got := NodePolicyName(tt.policy, tt.node); got != tt.want {
			t.Errorf("NodePolicyName(%q, %q) = %q, want %q", tt.policy, tt.node, got, tt.want)
		}
	}
	seen := map[string]string{}
	for _, node := range []string{long, long + "x", strings.Replace(long, "01", "02", 1), strings.Repeat("n", 253)} {
		got := NodePolicyName("static-ip", node)
		if len(got) > 63 || len(validation.IsDNS1123Subdomain(got)) > 0 || len(validation.IsValidLabelValue(got)) > 0 {
			t.Errorf("NodePolicyName(static-ip, %q) = %q: not a name of at most 63 characters that is a label value", node, got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("nodes %q and %q share the name %q", other, node, got)
		}
		seen[got] = node
	}
}

// TestPooledPolicyNodeRecord: a node's record is its addresses by pool,
// those a reset released under releasing, so that both hold their bits.
func TestPooledPolicyNodeRecord(t *testing.T) {
	n := PooledPolicyNode{Node: "n1",
		Addresses: []PooledAddress{{Capture: "a", Pool: "p", IP: "10.0.0.2"}, {Capture: "b", Pool: "q", IP: "10.1.0.2"}},
		Released:  []PooledAddress{{Capture: "a", Pool: "p", IP: "10.0.0.1"}}}
	r := n.Record()
	if got := r["p"].Held(); len(got) != 2 || got[0] != "10.0.0.2" || got[1] != "10.0.0.1" {
		t.Errorf("pool p holds %v, want the address and the released one", got)
	}
	if got := r["q"].Allocated; len(got) != 1 || got[0] != "10.1.0.2" {
		t.Errorf("pool q holds %v", got)
	}
	if len(n.Held()) != 3 {
		t.Errorf("Held() = %v, want all three", n.Held())
	}
}

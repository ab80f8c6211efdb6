package companion

import (
	"strings"
	"testing"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSelectsOthers: a generated policy that would select another Node
// than its own is told apart, by the hostname label two Nodes carry, and
// by any selector that does not name a hostname (every Node is looked
// at, not only those of the index by hostname).
func TestSelectsOthers(t *testing.T) {
	node := func(name, hostname string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "w", hostnameLabel: hostname}}}
	}
	w := &world{nodes: map[string]*corev1.Node{"a": node("a", "a"), "b": node("b", "b"), "twin": node("twin", "a")}}
	policy := func(selector map[string]string) *nmstatev1.NodeNetworkConfigurationPolicy {
		g := &nmstatev1.NodeNetworkConfigurationPolicy{}
		g.Spec.NodeSelector = selector
		return g
	}
	for _, c := range []struct {
		name     string
		node     string
		selector map[string]string
		others   string // "" for none
	}{
		{"its own hostname", "b", map[string]string{hostnameLabel: "b"}, ""},
		{"a hostname another Node carries", "a", map[string]string{hostnameLabel: "a"}, "twin"},
		{"a hostname and a label the other lacks", "a", map[string]string{hostnameLabel: "a", "role": "x"}, ""},
		{"no hostname", "b", map[string]string{"role": "w"}, "a, twin"},
	} {
		p := selectsOthers(w, c.node, policy(c.selector))
		switch {
		case c.others == "" && p != nil:
			t.Errorf("%s: %s", c.name, p.message)
		case c.others != "" && (p == nil || !strings.Contains(p.message, "Node "+c.others+" carries")):
			t.Errorf("%s: %v, want Node %s named", c.name, p, c.others)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// writeFile writes a proposed pool for plan -f.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlan runs plan against a real API server: a growth in place, a
// change that would take addresses (refused in place, with what a
// re-creation would do instead), a new pool taking over the records of an
// old one, and bad input.
func TestPlan(t *testing.T) {
	k, kubeconfig := cluster(t)
	pool(t, k, "traffic", ippoolv1.IPRange{CIDR: "10.30.0.0/24", Start: "10.30.0.10", End: "10.30.0.12"},
		"10.30.0.10", "10.30.0.11", "10.30.0.12")
	enactment(t, k, "node01", "static-ip", "traffic", "10.30.0.10")
	enactment(t, k, "node02", "static-ip", "traffic", "10.30.0.11")
	enactment(t, k, "node03", "static-ip", "traffic", "10.30.0.12")
	enactment(t, k, "node04", "old", "gone", "10.31.0.7")

	grow := writeFile(t, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: traffic}
spec:
  range: {cidr: 10.30.0.0/24, start: 10.30.0.2, end: 10.30.0.20}
---
apiVersion: nmstate.io/v1
kind: NodeNetworkConfigurationPolicy
metadata: {name: ignored}
`)
	out := pluginOK(t, kubeconfig, "plan", "-f", grow)
	wantLines(t, "plan output", out,
		"NodeIPPool traffic: 10.30.0.10-10.30.0.12 -> 10.30.0.2-10.30.0.20; kubectl apply changes it in place",
		"node02  static-ip  addr     10.30.0.11  recorded  1 -> 9   keep",
		"the start moves, so every offset moves",
		"3 holder(s) keep their address, 0 move to another, 0 find none; 16 of 19 addresses stay free",
	)

	shrink := writeFile(t, `{"apiVersion": "nmstate.io/v1", "kind": "NodeIPPool", "metadata": {"name": "traffic"},
  "spec": {"range": {"cidr": "10.30.0.0/24", "start": "10.30.0.11", "end": "10.30.0.12", "exclude": ["10.30.0.12"]}}}`)
	code, out, _ := plugin(kubeconfig, "plan", "-f", shrink)
	wantLines(t, "plan output", out,
		"kubectl apply would be refused:",
		"spec.range: Forbidden: the change takes 2 address(es) in use from their holders: 10.30.0.10 held by node node01",
		"Deleting the pool and creating it anew would do this:",
		"node01  static-ip  addr     10.30.0.10  recorded  0 -> -  lose: outside the proposed range 10.30.0.11-10.30.0.12; the proposed range has no free address left for it",
		"node02  static-ip  addr     10.30.0.11  recorded  1 -> 0  keep",
		"1 holder(s) keep their address, 0 move to another, 2 find none",
	)
	if code != 0 {
		t.Errorf("plan of a refused change: exit %d; it reports, it does not fail", code)
	}

	// A new pool under the name of a deleted one takes over its records.
	recreated := writeFile(t, "apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: gone}\nspec:\n  range: {cidr: 10.31.0.0/24}\n")
	out = pluginOK(t, kubeconfig, "plan", "-f", recreated, "-o", "json")
	var plans []poolPlan
	if err := json.Unmarshal([]byte(out), &plans); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(plans) != 1 || plans[0].Exists || len(plans[0].Outcomes) != 1 || plans[0].Outcomes[0].Node != "node04" ||
		plans[0].Outcomes[0].Verdict != "keep" || plans[0].Size != 254 || plans[0].Free != 253 {
		t.Errorf("plan of a new pool: %s", out)
	}

	// What the CRD's rules and the admission refuse: a gateway added to a
	// stored pool; a new pool whose reservation can never be handed out,
	// and one that overlaps a stored pool (the controller refuses the
	// newer).
	gateway := writeFile(t, "apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: traffic}\nspec:\n"+
		"  range: {cidr: 10.30.0.0/24, start: 10.30.0.10, end: 10.30.0.12}\n  gateway: 10.30.0.1\n")
	newPools := writeFile(t, "apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: storage}\nspec:\n"+
		"  range: {cidr: 10.32.0.0/24, start: 10.32.0.10, end: 10.32.0.20}\n  reservations: [{ip: 10.32.0.30, node: node01}]\n---\n"+
		"apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: traffic-2}\nspec:\n  range: {cidr: 10.30.0.0/24, start: 10.30.0.5}\n")
	for file, wants := range map[string][]string{
		gateway: {"NodeIPPool traffic: 10.30.0.10-10.30.0.12 -> 10.30.0.10-10.30.0.12; kubectl apply would be refused:",
			"  - spec.gateway is immutable: the enactments record it with every address; create a new pool to change it"},
		newPools: {"NodeIPPool storage: new, range 10.32.0.10-10.32.0.20; it would be refused or serve nothing:",
			"  - spec.reservations[10.32.0.30].ip: Invalid value: \"10.32.0.30\": cannot be handed out",
			"NodeIPPool traffic-2: new, range 10.30.0.5-10.30.0.254; it would be refused or serve nothing:",
			"  - it overlaps NodeIPPool traffic (10.30.0.10-10.30.0.12): the pool controller refuses the newer of two overlapping pools"},
	} {
		wantLines(t, "plan output", pluginOK(t, kubeconfig, "plan", "-f", file), wants...)
	}

	// A stored pool whose reservation can never be handed out (admitted
	// before the webhook ran): the webhook judges only a change of the
	// range or the reservations, so the same spec is applied in place.
	legacy := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: ippoolv1.NodeIPPoolSpec{
		Range:        ippoolv1.IPRange{CIDR: "10.33.0.0/24", Start: "10.33.0.10", End: "10.33.0.20"},
		Reservations: []ippoolv1.Reservation{{IP: "10.33.0.30", Node: "node01"}}}}
	if err := k.Create(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	out = pluginOK(t, kubeconfig, "plan", "-f", writeFile(t, "apiVersion: nmstate.io/v1\nkind: NodeIPPool\n"+
		"metadata: {name: legacy, labels: {team: net}}\nspec:\n  range: {cidr: 10.33.0.0/24, start: 10.33.0.10, end: 10.33.0.20}\n"+
		"  reservations: [{ip: 10.33.0.30, node: node01}]\n"))
	wantLines(t, "plan of an unchanged range and reservations", out,
		"NodeIPPool legacy: 10.33.0.10-10.33.0.20 -> 10.33.0.10-10.33.0.20; kubectl apply changes it in place")

	// The cluster still has what it had: plan changes nothing.
	if code, out, _ := plugin(kubeconfig, "show", "traffic"); code != 0 || !strings.Contains(out, "10.30.0.10-10.30.0.12") {
		t.Errorf("show after plan: exit %d\n%s", code, out)
	}

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plan"}, 2, "plan needs -f FILE"},
		{[]string{"plan", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, 1, "read the proposed pool"},
		{[]string{"plan", "-f", writeFile(t, "kind: ConfigMap\n")}, 1, "holds no NodeIPPool"},
		{[]string{"plan", "-f", writeFile(t, "kind: NodeIPPool\nmetadata: {name: x}\nspec: {range: {cidr: 10.0.0.0/24}, typo: 1}\n")}, 1,
			`document 1: not a valid NodeIPPool: error unmarshaling JSON: while decoding JSON: json: unknown field "typo"`},
		{[]string{"plan", "-f", writeFile(t, "kind: NodeIPPool\nmetadata: {name: x}\nspec: {range: {cidr: 10.0.0.0/30, start: 10.0.0.3}}\n")}, 1,
			"the proposed pool cannot hand out addresses"},
	} {
		code, _, errOut := plugin(kubeconfig, tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut, tt.code, tt.want)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// carrier creates a Node labelled role and its NodeNetworkState showing
// addrs on eth1 (and 192.0.2.9 on eth0, which no template configures).
func carrier(t *testing.T, k client.Client, name, role string, addrs ...string) {
	t.Helper()
	ctx := context.Background()
	if err := k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": role}}}); err != nil {
		t.Fatal(err)
	}
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k.Create(ctx, nns); err != nil {
		t.Fatal(err)
	}
	var list []string
	for _, a := range addrs {
		list = append(list, fmt.Sprintf(`{"ip":%q,"prefix-length":24}`, a))
	}
	nns.Status.CurrentState = shared.NewState(fmt.Sprintf(`{"interfaces":[`+
		`{"name":"eth0","ipv4":{"enabled":true,"address":[{"ip":"10.62.0.99","prefix-length":24}]}},`+
		`{"name":"eth1","ipv4":{"enabled":true,"address":[%s]}}]}`, strings.Join(list, ",")))
	nns.Status.LastSuccessfulUpdateTime = metav1.Now()
	if err := k.Status().Update(ctx, nns); err != nil {
		t.Fatal(err)
	}
}

// migration proposes a pool, the pooled policy for eth1 of the workers,
// and a policy that reads a gateway the pool does not set.
var migration = `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: traffic}
spec:
  range: {cidr: 10.62.0.0/24, start: 10.62.0.10, end: 10.62.0.200, exclude: ["10.62.0.52"]}
---
` + envtest.PooledPolicyYAML("traffic-eth1", "role", "worker", "traffic") + `
---
apiVersion: nmstate.io/v1
kind: NodeNetworkConfigurationPolicy
metadata: {name: with-gateway}
spec:
  nodeSelector: {role: worker}
  capture: {addr: ippool.traffic.allocate}
  desiredState:
    routes:
      config:
      - destination: 0.0.0.0/0
        next-hop-address: "{{ capture.addr.gateway }}"
`

// TestPlanAdoption: before any pool or pooled policy exists, plan shows
// which node keeps the address it carries from its per-node policy and
// which is renumbered, and why; and a template the pool cannot render.
func TestPlanAdoption(t *testing.T) {
	k, kubeconfig := cluster(t)
	carrier(t, k, "node01", "worker", "10.62.0.43")
	carrier(t, k, "node02", "worker", "10.62.0.46")
	carrier(t, k, "node03", "worker", "10.62.0.52")               // excluded
	carrier(t, k, "node04", "worker")                             // nothing
	carrier(t, k, "node05", "worker", "10.62.0.49", "10.62.0.48") // two: the lowest
	carrier(t, k, "node06", "storage", "10.62.0.60")              // not selected
	carrier(t, k, "node07", "worker")                             // a DHCP lease on eth1, below
	if err := k.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node08",
		Labels: map[string]string{"role": "worker"}}}); err != nil { // no state published yet
		t.Fatal(err)
	}
	// node09's state object holds a state but was never published (no
	// successful update): it waits, but no other node gets what it shows.
	carrier(t, k, "node09", "worker", "10.62.0.10")
	unpublished := &nncev1beta1.NodeNetworkState{}
	if err := k.Get(context.Background(), client.ObjectKey{Name: "node09"}, unpublished); err != nil {
		t.Fatal(err)
	}
	unpublished.Status.LastSuccessfulUpdateTime = metav1.Time{}
	if err := k.Status().Update(context.Background(), unpublished); err != nil {
		t.Fatal(err)
	}
	dhcp := &nncev1beta1.NodeNetworkState{}
	if err := k.Get(context.Background(), client.ObjectKey{Name: "node07"}, dhcp); err != nil {
		t.Fatal(err)
	}
	dhcp.Status.CurrentState = shared.NewState(`{"interfaces":[{"name":"eth1","ipv4":{"enabled":true,"dhcp":true,` +
		`"address":[{"ip":"10.62.0.70","prefix-length":24}]}}]}`)
	if err := k.Status().Update(context.Background(), dhcp); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, migration)

	out := pluginOK(t, kubeconfig, "plan", "-f", file)
	wantLines(t, "plan output", out,
		"NodeIPPool traffic: new, range",
		"NodeNetworkConfigurationPolicy traffic-eth1: 8 node captures, 3 keep their address, 1 renumbered",
		"node01  addr     traffic  10.62.0.43 on eth1",
		"keeps: adopted: it already carries 10.62.0.43 on eth1",
		"10.62.0.46  keeps",
		"renumbered: cannot adopt 10.62.0.52 on eth1 (it is excluded from the range 10.62.0.10-10.62.0.200)",
		"new: it carries no address on eth1",
		"waits: it has published no NodeNetworkState: it is served once its handler publishes what it carries",
		"10.62.0.48  keeps",
		"! the desired state cannot be rendered: the template reads {{ capture.addr.gateway }}, but NodeIPPool traffic sets no spec.gateway",
	)
	if strings.Contains(out, "node06") {
		t.Errorf("plan shows a node the policy does not select:\n%s", out)
	}

	code, out, _ := plugin(kubeconfig, "plan", "-f", file, "-o", "json")
	var got struct {
		Policies []policyPlan `json:"policies"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Policies) != 2 {
		t.Fatalf("plan -o json exited %d:\n%s", code, out)
	}
	ips := map[string]string{}
	for _, np := range got.Policies[0].Nodes {
		ips[np.Node] = np.Verdict + " " + np.IP
	}
	want := map[string]string{"node01": "keeps 10.62.0.43", "node02": "keeps 10.62.0.46", "node03": "renumbered 10.62.0.11",
		"node04": "new 10.62.0.12", "node05": "keeps 10.62.0.48", "node07": "new 10.62.0.13", "node08": "waits ", "node09": "waits "}
	if fmt.Sprint(ips) != fmt.Sprint(want) {
		t.Errorf("planned %v, want %v", ips, want)
	}
}

// TestPlanReservations: plan says what a reservation does to the nodes it
// is for: kept where the node carries the reserved address, a renumbering
// where it carries another, passed by while another node carries it; and
// that an address of another family on the interface stays.
func TestPlanReservations(t *testing.T) {
	k, kubeconfig := cluster(t)
	carrier(t, k, "node11", "worker", "10.63.0.20") // its reservation
	carrier(t, k, "node12", "worker", "10.63.0.44") // reserved .21
	carrier(t, k, "node13", "worker", "10.63.0.45") // reserved .22, which node14 carries
	carrier(t, k, "node14", "worker", "10.63.0.22")
	carrier(t, k, "node15", "worker")               // fd00:63::5 only, below; reserved .23
	carrier(t, k, "node16", "worker", "10.63.0.50") // its enactment of another policy records it
	enactment(t, k, "node16", "other", "rack", "10.63.0.50")
	carrier(t, k, "node17", "worker", "10.63.0.60") // recorded under the name of a pool deleted since
	enactment(t, k, "node17", "older", "old", "10.63.0.60")
	v6 := &nncev1beta1.NodeNetworkState{}
	if err := k.Get(context.Background(), client.ObjectKey{Name: "node15"}, v6); err != nil {
		t.Fatal(err)
	}
	v6.Status.CurrentState = shared.NewState(`{"interfaces":[{"name":"eth1","ipv4":{"enabled":false},` +
		`"ipv6":{"enabled":true,"address":[{"ip":"fd00:63::5","prefix-length":64}]}}]}`)
	if err := k.Status().Update(context.Background(), v6); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: rack}
spec:
  range: {cidr: 10.63.0.0/24, start: 10.63.0.10, end: 10.63.0.200}
  reservations:
  - {ip: 10.63.0.20, node: node11}
  - {ip: 10.63.0.21, node: node12}
  - {ip: 10.63.0.22, node: node13}
  - {ip: 10.63.0.23, node: node15}
---
`+envtest.PooledPolicyYAML("rack-eth1", "role", "worker", "rack"))

	out := pluginOK(t, kubeconfig, "plan", "-f", file)
	wantLines(t, "plan output", out,
		"NodeNetworkConfigurationPolicy rack-eth1: 7 node captures, 2 keep their address, 2 renumbered",
		"10.63.0.20  keeps: adopted: it already carries 10.63.0.20 on eth1",
		"10.63.0.21  renumbered: its reservation comes before what it carries",
		"10.63.0.45  keeps: adopted: it already carries 10.63.0.45 on eth1; "+
			"its reservation 10.63.0.22 (node node14 carries it): it keeps what it is given (ReservationConflict while that node carries it",
		"10.63.0.22 on eth1  10.63.0.10  renumbered: cannot adopt 10.63.0.22 on eth1 (it is reserved for node node13)",
		"fd00:63::5 on eth1  10.63.0.23  new: reserved for it",
		"10.63.0.50 on eth1  10.63.0.11  new: what it carries on eth1 is not this capture's: another family's, "+
			"or the node's under another capture or record",
		"10.63.0.60 on eth1  10.63.0.12  new: what it carries on eth1 is not this capture's",
	)
	if strings.Contains(out, "a reservation for the node comes first") {
		t.Errorf("plan gives a reservation as the reason where none was taken:\n%s", out)
	}

	// The same pool stored already: its reservations are served as the
	// pool controller serves them, a reserved address carried by
	// another node passed by.
	stored := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "rack"}, Spec: ippoolv1.NodeIPPoolSpec{
		Range: ippoolv1.IPRange{CIDR: "10.63.0.0/24", Start: "10.63.0.10", End: "10.63.0.200"},
		Reservations: []ippoolv1.Reservation{{IP: "10.63.0.20", Node: "node11"}, {IP: "10.63.0.21", Node: "node12"},
			{IP: "10.63.0.22", Node: "node13"}}}}
	if err := k.Create(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	out = pluginOK(t, kubeconfig, "plan", "-f", writeFile(t, envtest.PooledPolicyYAML("rack-eth1", "role", "worker", "rack")))
	wantLines(t, "plan of the stored pool", out,
		"10.63.0.20  keeps: reserved for it, and it carries it already",
		"10.63.0.21  renumbered: its reservation comes before what it carries",
		"10.63.0.45  keeps: adopted: it already carries 10.63.0.45 on eth1; "+
			"its reservation 10.63.0.22 (node node14 carries it): it keeps what it is given (ReservationConflict while that node carries it",
		"renumbered: cannot adopt 10.63.0.22 on eth1",
	)
}

// TestPlanRefusedPool: a policy drawing from a proposed pool that would be
// refused plans no address from it. A new pool that overlaps a stored one
// hands out nothing (the pool controller refuses the newer of the two),
// and the plan says so instead of numbering the nodes; a refused change
// of a stored pool leaves that pool as it is, and the nodes are planned
// from it.
func TestPlanRefusedPool(t *testing.T) {
	k, kubeconfig := cluster(t)
	carrier(t, k, "node21", "worker", "10.64.0.20")
	carrier(t, k, "node22", "worker")
	pool(t, k, "rack", ippoolv1.IPRange{CIDR: "10.64.0.0/24", Start: "10.64.0.10", End: "10.64.0.100"})

	overlapping := writeFile(t, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: rack-2}
spec:
  range: {cidr: 10.64.0.0/24, start: 10.64.0.50}
---
`+envtest.PooledPolicyYAML("rack-2-eth1", "role", "worker", "rack-2"))
	out := pluginOK(t, kubeconfig, "plan", "-f", overlapping)
	wantLines(t, "plan output", out,
		"NodeIPPool rack-2: new, range 10.64.0.50-10.64.0.254; it would be refused or serve nothing:",
		"! NodeIPPool rack-2 as proposed would hand out nothing: it overlaps NodeIPPool rack",
	)
	if strings.Contains(out, "node21") || strings.Contains(out, "node22") {
		t.Errorf("plan numbers nodes from a pool that would hand out nothing:\n%s", out)
	}

	// A gateway added to the stored pool is refused (spec.gateway is
	// immutable): its policy is planned from the pool as stored.
	changed := writeFile(t, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: rack}
spec:
  range: {cidr: 10.64.0.0/24, start: 10.64.0.20, end: 10.64.0.100}
  gateway: 10.64.0.1
---
`+envtest.PooledPolicyYAML("rack-eth1", "role", "worker", "rack"))
	out = pluginOK(t, kubeconfig, "plan", "-f", changed, "-o", "json")
	var got struct {
		Pools    []poolPlan   `json:"pools"`
		Policies []policyPlan `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Pools) != 1 || got.Pools[0].InPlace || len(got.Policies) != 1 {
		t.Fatalf("plan -o json: %v:\n%s", err, out)
	}
	ips := map[string]string{}
	for _, np := range got.Policies[0].Nodes {
		ips[np.Node] = np.Verdict + " " + np.IP
	}
	// From the stored range (10.64.0.10 on), not the refused one
	// (10.64.0.20 on): node22 gets the stored range's lowest free address.
	want := map[string]string{"node21": "keeps 10.64.0.20", "node22": "new 10.64.0.10"}
	if fmt.Sprint(ips) != fmt.Sprint(want) || len(got.Policies[0].Problems) > 0 {
		t.Errorf("planned %v (problems %q), want %v", ips, got.Policies[0].Problems, want)
	}
}

// TestPlanSharedSelectorReservation: a reservation by label selector
// matching two nodes, one of which carries its address, is that node's:
// the other is served another address, and the plan does not call the
// carrier a conflict (the pool controller does not either). One carried
// by a node it does not match is passed by, without the
// ReservationNotHeld only a reservation by name comes to.
func TestPlanSharedSelectorReservation(t *testing.T) {
	k, kubeconfig := cluster(t)
	carrier(t, k, "node31", "worker")
	carrier(t, k, "node32", "worker", "10.65.0.30")
	carrier(t, k, "node33", "worker", "10.65.0.31")
	for _, name := range []string{"node31", "node32"} {
		var n corev1.Node
		if err := k.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		n.Labels["rack"] = "r1"
		if err := k.Update(context.Background(), &n); err != nil {
			t.Fatal(err)
		}
	}
	out := pluginOK(t, kubeconfig, "plan", "-f", writeFile(t, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: rack}
spec:
  range: {cidr: 10.65.0.0/24, start: 10.65.0.10, end: 10.65.0.100}
  reservations:
  - {ip: 10.65.0.30, nodeSelector: {matchLabels: {rack: r1}}}
  - {ip: 10.65.0.31, nodeSelector: {matchLabels: {rack: r1}}}
---
`+envtest.PooledPolicyYAML("rack-eth1", "role", "worker", "rack")))
	wantLines(t, "plan output", out,
		"NodeNetworkConfigurationPolicy rack-eth1: 3 node captures, 1 keep their address, 1 renumbered",
		"node31  addr     rack  -                   10.65.0.10  new: it carries no address on eth1; "+
			"its reservation 10.65.0.31 (node node33 carries it): it keeps what it is given "+
			"(ReservationConflict while that node carries it, reset it after to move it to its reservation)\n",
		"node32  addr     rack  10.65.0.30 on eth1  10.65.0.30  keeps",
		"node33  addr     rack  10.65.0.31 on eth1  10.65.0.11  renumbered: cannot adopt 10.65.0.31 on eth1",
	)
	if strings.Contains(out, "node node32 carries it") || strings.Contains(out, "ReservationNotHeld") {
		t.Errorf("plan calls a node the reservation matches a conflict, or promises ReservationNotHeld for a selector:\n%s", out)
	}
}

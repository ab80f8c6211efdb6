package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// TestCheckNetworks: check compares what the nodes' NodeNetworkStates
// carry of a pool's range with the records. An address on two nodes, or
// on one node while a record holds it for another, is a mismatch (exit
// 1); an address a node carries that no record holds is noted with what
// becomes of it; the state a deleted Node left behind counts for nothing.
func TestCheckNetworks(t *testing.T) {
	k, kubeconfig := cluster(t)
	ctx := context.Background()
	pool(t, k, "nets", ippoolv1.IPRange{CIDR: "10.70.0.0/24", Start: "10.70.0.10", End: "10.70.0.50"},
		"10.70.0.10", "10.70.0.11", "10.70.0.12", "10.70.0.14", "10.70.0.16", "10.70.0.45")
	carrier(t, k, "net01", "worker", "10.70.0.10") // recorded by its own enactment: fine
	enactment(t, k, "net01", "p", "nets", "10.70.0.10")
	carrier(t, k, "net02", "worker", "10.70.0.11") // also on net03's network
	carrier(t, k, "net03", "worker", "10.70.0.11")
	enactment(t, k, "net02", "p", "nets", "10.70.0.11")
	carrier(t, k, "net04", "worker", "10.70.0.12") // recorded for net05
	enactment(t, k, "net05", "p", "nets", "10.70.0.12")
	carrier(t, k, "net06", "worker", "10.70.0.13") // free, recorded by none
	carrier(t, k, "net07", "worker", "10.70.0.14") // set, recorded by none
	carrier(t, k, "net08", "worker", "10.70.0.16") // quarantined for it: nothing to say
	carrier(t, k, "net13", "worker", "10.70.0.18") // kept for net14's return
	editStatus(t, k, "nets", true, func(p *ippoolv1.NodeIPPool) {
		poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.70.0.16", Node: "net08", Since: metav1.Now()})
		poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.70.0.18", Node: "net14", Holder: "net14.p", Capture: "addr", Since: metav1.Now()})
	})
	carrier(t, k, "net09", "worker", "10.70.0.15") // its Node deleted: its state says nothing
	carrier(t, k, "net10", "worker", "10.70.0.15")
	if err := k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "net09"}}); err != nil {
		t.Fatal(err)
	}
	// An older pool overlapping this one records net12's address, which
	// this pool's bitmap sets too (poolstatus.OwnersOf).
	pool(t, k, "nets-older", ippoolv1.IPRange{CIDR: "10.70.0.0/24", Start: "10.70.0.45", End: "10.70.0.46"}, "10.70.0.45")
	carrier(t, k, "net12", "worker", "10.70.0.45")
	enactment(t, k, "net12", "p", "nets-older", "10.70.0.45")
	carrier(t, k, "net11", "worker") // a DHCP lease in the range
	lease := &nncev1beta1.NodeNetworkState{}
	if err := k.Get(ctx, client.ObjectKey{Name: "net11"}, lease); err != nil {
		t.Fatal(err)
	}
	lease.Status.CurrentState = shared.NewState(`{"interfaces":[{"name":"eth1","ipv4":{"enabled":true,"dhcp":true,` +
		`"address":[{"ip":"10.70.0.17","prefix-length":24}]}}]}`)
	if err := k.Status().Update(ctx, lease); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := plugin(kubeconfig, "check", "nets")
	if code != 1 {
		t.Fatalf("check exited %d, want 1:\n%s%s", code, out, errOut)
	}
	wantLines(t, "check", out,
		"MISMATCH  nets: 10.70.0.11 is on the networks of nodes net02, net03: one address on two NICs",
		"MISMATCH  nets: 10.70.0.12 is on node net04's network, but enactment net05.p (node net05) records it for another node",
		"NOTE      nets: 10.70.0.13 is on node net06's network and recorded by no holder: free in the pool; node net06 adopts it",
		"NOTE      nets: 10.70.0.14 is on node net07's network and recorded by no holder: set in the pool; the pool controller holds it for node net07",
		"NOTE      nets: 10.70.0.15 is on node net10's network and recorded by no holder: free in the pool",
		"NOTE      nets: 10.70.0.17 is on node net11's network and recorded by no holder: learned (DHCP or autoconfiguration)",
		"NOTE      nets: 10.70.0.18 is on node net13's network and recorded by no holder: kept for the return of net14.p (node net14), "+
			"which does not get it back, nor does any other holder, while node net13 carries it",
		"1 of 1 pools disagree with their holders' records or the nodes' networks",
	)
	for _, unwanted := range []string{"10.70.0.10 is on", "10.70.0.16", "net09", "10.70.0.45"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("check says %q:\n%s", unwanted, out)
		}
	}
}

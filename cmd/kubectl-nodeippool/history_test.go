package main

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestHistoryOfAnAddress: the audit trail records its Events through a
// real recorder on a real API server, for holders of every kind, and
// history lists those about one address, oldest first, and nothing about
// others.
func TestHistoryOfAnAddress(t *testing.T) {
	env, _, kubeconfig := envtest.Cluster(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	defer b.Shutdown()
	trail := audit.Trail{Events: b.NewRecorder(env.Scheme, "nmstate-ippool-pool-controller")}
	ip, other := netip.MustParseAddr("10.10.10.7"), netip.MustParseAddr("10.10.10.8")
	for _, c := range []audit.Change{
		{Event: audit.Recorded, Pool: "traffic", Address: ip, Holder: holder.ForEnactment("node01.static-ip")},
		{Event: audit.Quarantined, Pool: "traffic", Address: ip, Holder: holder.ForEnactment("node01.static-ip"), Node: "node01", Reason: "Reset"},
		{Event: audit.Recorded, Pool: "traffic", Address: other, Holder: holder.ForPolicyNode("static-ip", "node02")},
		{Event: audit.Lifted, Pool: "traffic", Address: ip, Holder: holder.ForEnactment("node01.static-ip"), Node: "node01",
			Reason: "QuarantineLifted", Evidence: "node node01 showed it gone"},
		{Event: audit.Recorded, Pool: "traffic", Address: ip, Holder: holder.ForClaim("tenant", "m1-eth0")},
	} {
		trail.Record(ctx, []audit.Change{c})
		time.Sleep(20 * time.Millisecond) // distinct event times, in order
	}

	var out string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"history", "10.10.10.7", "--kubeconfig", kubeconfig}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		out = stdout.String()
		if strings.Count(out, "\n") == 5 {
			break
		}
	}
	want := []string{
		"AddressRecorded     NodeNetworkConfigurationEnactment node01.static-ip",
		"AddressQuarantined  NodeNetworkConfigurationEnactment node01.static-ip  10.10.10.7 of NodeIPPool traffic quarantined, holder enactment node01.static-ip on node node01: Reset",
		"AddressLifted       NodeNetworkConfigurationEnactment node01.static-ip  10.10.10.7 of NodeIPPool traffic lifted, holder enactment node01.static-ip on node node01: QuarantineLifted (node node01 showed it gone)",
		"AddressRecorded     IPAddressClaim tenant/m1-eth0",
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want)+1 {
		t.Fatalf("history:\n%s", out)
	}
	for i, w := range want {
		if !strings.Contains(lines[i+1], w) {
			t.Errorf("line %d: %q, want it to hold %q\n%s", i+1, lines[i+1], w, out)
		}
	}
	if strings.Contains(out, "10.10.10.8") {
		t.Errorf("history of 10.10.10.7 shows 10.10.10.8:\n%s", out)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"history", "10.10.10.9", "--kubeconfig", kubeconfig}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "No Events about 10.10.10.9") {
		t.Errorf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	if code := run([]string{"history", "node01", "--kubeconfig", kubeconfig}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `"node01" is not an IP address`) {
		t.Errorf("a name for an address: exit %d: %s", code, stderr.String())
	}
}

// TestHistoryOfAddressesOfOneHolder: Events of the same kind about
// different addresses of one holder (every node of a pooled policy, two
// captures of one enactment) or of no holder (the pool's own holds) are
// each kept whole, none folded into another's series by the recorder
// (events.k8s.io merges Events whose objects, reason and action are the
// same, whatever their notes): history finds every address.
func TestHistoryOfAddressesOfOneHolder(t *testing.T) {
	env, _, kubeconfig := envtest.Cluster(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	defer b.Shutdown()
	trail := audit.Trail{Events: b.NewRecorder(env.Scheme, "nmstate-ippool-pool-controller")}
	changes := map[string]audit.Change{}
	for i, node := range []string{"node01", "node02", "node03"} {
		ip := netip.AddrFrom4([4]byte{10, 10, 10, byte(20 + i)})
		changes[ip.String()] = audit.Change{Event: audit.Recorded, Pool: "traffic", Address: ip, Holder: holder.ForPolicyNode("rack", node)}
	}
	for i := range 2 {
		ip := netip.AddrFrom4([4]byte{10, 10, 10, byte(30 + i)})
		changes[ip.String()] = audit.Change{Event: audit.Recorded, Pool: "traffic", Address: ip, Holder: holder.ForEnactment("node04.two")}
	}
	for i, node := range []string{"node05", "node06"} {
		ip := netip.AddrFrom4([4]byte{10, 10, 10, byte(40 + i)})
		changes[ip.String()] = audit.Change{Event: audit.Quarantined, Pool: "traffic", Address: ip, Node: node, Reason: "CarriedUnrecorded"}
	}
	for _, c := range changes {
		trail.Record(ctx, []audit.Change{c})
	}
	for ip, c := range changes {
		var out string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{"history", ip, "--kubeconfig", kubeconfig}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if out = stdout.String(); strings.Contains(out, c.Sentence()) {
				break
			}
		}
		if !strings.Contains(out, c.Sentence()) {
			t.Errorf("history of %s lacks %q:\n%s", ip, c.Sentence(), out)
		}
	}
}

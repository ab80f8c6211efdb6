package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// cluster starts an API server, with opts, and returns a client and a
// kubeconfig for the plugin.
func cluster(t *testing.T, opts ...envtest.Option) (client.Client, string) {
	t.Helper()
	_, k, kubeconfig := envtest.Cluster(t, opts...)
	return k, kubeconfig
}

// pool creates a pool whose bitmap has the given addresses set.
func pool(t *testing.T, k client.Client, name string, r ippoolv1.IPRange, set ...string) {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}}
	if err := k.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	rng, err := poolstatus.Range(p)
	if err != nil {
		t.Fatal(err)
	}
	alloc := ippool.NewAllocator(rng)
	for _, ip := range set {
		if err := alloc.AllocateIP(mustAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	poolstatus.Set(p, alloc)
	p.Status.Conditions = []metav1.Condition{{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue,
		Reason: ippoolv1.ReasonReconciledPool, Message: "The pool is up to date", LastTransitionTime: metav1.Now()}}
	p.Status.Stamp = poolstatus.Stamp(p) // as the pool controller vouches after a rebuild
	if err := k.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// editStatus changes a pool's status by hand; with vouch, stamped as a
// controller would.
func editStatus(t *testing.T, k client.Client, name string, vouch bool, edit func(*ippoolv1.NodeIPPool)) {
	t.Helper()
	var p ippoolv1.NodeIPPool
	if err := k.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	edit(&p)
	if vouch {
		p.Status.Stamp = poolstatus.Stamp(&p)
	}
	if err := k.Status().Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
}

// enactment creates node.policy recording ips from a pool on eth1 through
// the capture addr.
func enactment(t *testing.T, k client.Client, node, policy, poolName string, ips ...string) {
	t.Helper()
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: node + "." + policy,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: policy}}}
	if err := k.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	e.Status.IPPool = ippoolv1.EnactmentIPPools{poolName: {Allocated: ips}}
	e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{
		"addr": {State: shared.NewState("ip: " + ips[0] + "\nprefix-length: 24\n")}}
	e.Status.DesiredState = shared.NewState("interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: " + ips[0] + "\n      prefix-length: 24\n")
	if err := k.Status().Update(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

func plugin(kubeconfig string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(append(args, "--kubeconfig", kubeconfig), &out, &errOut)
	return code, out.String(), errOut.String()
}

// pluginOK runs the plugin, fails the test unless it exits 0, and returns
// what it printed.
func pluginOK(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	code, out, errOut := plugin(kubeconfig, args...)
	if code != 0 {
		t.Fatalf("%s exited %d: %s%s", args[0], code, out, errOut)
	}
	return out
}

// wantLines reports each of wants that out lacks.
func wantLines(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}

// TestClusterCommands runs list, show, decode and check against a real API
// server, on a pool that agrees with its enactments and one that disagrees
// in every way check knows.
func TestClusterCommands(t *testing.T) {
	k, kubeconfig := cluster(t)
	pool(t, k, "good", ippoolv1.IPRange{CIDR: "10.10.11.0/24", Start: "10.10.11.4", End: "10.10.11.10", Exclude: []string{"10.10.11.5", "10.10.11.7"}},
		"10.10.11.4", "10.10.11.6")
	enactment(t, k, "node01", "static-ip", "good", "10.10.11.4")
	enactment(t, k, "node02", "static-ip", "good", "10.10.11.6")
	// bad: .2 set and claimed twice, .3 claimed but not set, .9 set and
	// unclaimed, .200 claimed outside the range; an enactment records a
	// pool that does not exist.
	pool(t, k, "bad", ippoolv1.IPRange{CIDR: "10.20.0.0/24", Start: "10.20.0.1", End: "10.20.0.10"}, "10.20.0.2", "10.20.0.9")
	enactment(t, k, "node01", "bad-a", "bad", "10.20.0.2")
	enactment(t, k, "node02", "bad-b", "bad", "10.20.0.2")
	enactment(t, k, "node03", "bad-c", "bad", "10.20.0.3")
	enactment(t, k, "node04", "bad-d", "bad", "10.20.0.200")
	enactment(t, k, "node05", "gone", "deleted-pool", "10.30.0.1")
	// held: .1 in flight, .2 quarantined, .3 free and kept for a deleted
	// node's return (all expected, no problem); .7 recorded under another
	// pool's name inside this range, not set.
	pool(t, k, "held", ippoolv1.IPRange{CIDR: "10.40.0.0/24"}, "10.40.0.1", "10.40.0.2", "10.40.0.5")
	editStatus(t, k, "held", true, func(p *ippoolv1.NodeIPPool) {
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.40.0.1", Holder: "node07.x", Token: "1", Since: metav1.Now()})
		poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.40.0.2", Node: "node08", Holder: "node08.static-ip",
			Interface: "eth1", Since: metav1.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC),
			StateSeenAtRelease: ptr.To(metav1.Date(2026, 11, 23, 8, 59, 58, 0, time.UTC))})
		poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.40.0.3", Node: "node09", Holder: "node09.static-ip", Capture: "addr",
			Since: metav1.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)})
		// .5: found on node10's network, recorded by no holder: held for it.
		poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.40.0.5", Node: "node10", Interface: "eth1",
			Since: metav1.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)})
	})
	enactment(t, k, "node06", "other", "other-pool", "10.40.0.7")
	// hand: a status nobody vouched for.
	pool(t, k, "hand", ippoolv1.IPRange{CIDR: "10.50.0.0/24"}, "10.50.0.3")
	editStatus(t, k, "hand", false, func(p *ippoolv1.NodeIPPool) { p.Status.AllocatedOffsets = "" })

	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"list", []string{"list"}, 0, []string{"NAME  CIDR           RANGE                   SIZE  ALLOCATED  FREE  AVAILABLE  REASON",
			"good  10.10.11.0/24  10.10.11.4-10.10.11.10  5     2          3     True       ReconciledPool"}},
		{"show", []string{"show", "good"}, 0, []string{"Range:         10.10.11.0/24 10.10.11.4-10.10.11.10 (prefix-length 24)",
			"0       10.10.11.4  allocated  node01  eth1       static-ip  addr", "2       10.10.11.6  allocated  node02  eth1       static-ip  addr"}},
		{"show every state", []string{"show", "bad"}, 0, []string{"1       10.20.0.2    collision  node01  eth1       bad-a   addr",
			"1       10.20.0.2    collision  node02  eth1       bad-b   addr", "2       10.20.0.3    missing    node03", "8       10.20.0.9    unclaimed  -",
			"-       10.20.0.200  outside    node04"}},
		{"show held and other pools' records", []string{"show", "held"}, 0, []string{"0       10.40.0.1  in-flight    -",
			"1       10.40.0.2  quarantined  node08  eth1       static-ip  -", "2       10.40.0.3  kept         node09  -          static-ip  addr",
			"6       10.40.0.7  missing      node06",
			"Quarantined:\n  10.40.0.2: released by node08.static-ip on node node08 at 2026-11-23T09:00:00Z; handed to nobody until " +
				"node node08 publishes a network state without it (its state then was of 2026-11-23T08:59:58Z), or its Node is gone past the departure hold"}},
		{"decode a quarantined address", []string{"decode", "held", "10.40.0.2"}, 0, []string{"NodeIPPool held: 10.40.0.2 is offset 1, " +
			"quarantined: released by node08.static-ip on node node08 at 2026-11-23T09:00:00Z; handed to nobody until node node08 publishes"}},
		{"decode a hold of what a node carries", []string{"decode", "held", "10.40.0.5"}, 0, []string{"NodeIPPool held: 10.40.0.5 is offset 4, " +
			"quarantined: held since 2026-11-23T11:00:00Z for node node10, whose network carries it and no holder records it: node node10 adopts it"}},
		{"decode a kept address", []string{"decode", "held", "10.40.0.3"}, 0, []string{"NodeIPPool held: 10.40.0.3 is offset 2, free and kept " +
			"since 2026-11-23T10:00:00Z for the return of node node09 (enactment node09.static-ip, capture addr); other holders get it only when " +
			"no other address is free, and no holder while another node's network carries it"}},
		{"decode an offset", []string{"decode", "good", "2"}, 0, []string{"NodeIPPool good: 10.10.11.6 is offset 2, allocated, held by node node02 on eth1 " +
			"(enactment node02.static-ip, policy static-ip, capture addr)"}},
		{"decode an excluded address", []string{"decode", "good", "10.10.11.5"}, 0, []string{"10.10.11.5 is offset 1, excluded"}},
		{"decode a free address", []string{"decode", "good", "10.10.11.8"}, 0, []string{"10.10.11.8 is offset 4, free"}},
		{"check a good pool", []string{"check", "good"}, 0, []string{"ok        good", "all 1 pools agree with their holders' records"}},
		{"check everything", []string{"check"}, 1, []string{
			"MISMATCH  bad: 10.20.0.3 (offset 2) is recorded by node03.bad-c but not set in the bitmap",
			"MISMATCH  bad: 10.20.0.9 (offset 8) is set in the bitmap but recorded by no holder",
			"MISMATCH  bad: 10.20.0.2 is recorded by node01.bad-a and node02.bad-b",
			"MISMATCH  bad: 10.20.0.200 is recorded by node04.bad-d but the range (10.20.0.0/24 10.20.0.1-10.20.0.10) does not hand it out",
			"MISMATCH  deleted-pool: NodeIPPool deleted-pool does not exist, but node05.gone records 10.30.0.1",
			"MISMATCH  held: 10.40.0.7 (offset 6) is recorded by node06.other but not set in the bitmap",
			"MISMATCH  hand: the status does not match its stamp (written by hand?): handlers allocate nothing until the pool controller has rebuilt it",
			"ok        good", "5 of 6 pools disagree with their holders' records"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := plugin(kubeconfig, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestClusterCommandErrors: a wrong name, offset or output gets a precise
// error and the right exit code.
func TestClusterCommandErrors(t *testing.T) {
	k, kubeconfig := cluster(t)
	pool(t, k, "p", ippoolv1.IPRange{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10"})
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"show", "nope"}, 1, `NodeIPPool "nope" not found; 'kubectl nodeippool list' shows the pools`},
		{[]string{"decode", "p", "99"}, 1, "NodeIPPool p: not in range: offset 99 is past the last offset 9 of 10.0.0.1-10.0.0.10"},
		{[]string{"decode", "p", "10.9.9.9"}, 1, "10.9.9.9 is not in NodeIPPool p (10.0.0.0/24 10.0.0.1-10.0.0.10)"},
		{[]string{"decode", "p", "x"}, 1, `"x" is neither an offset nor an IP address`},
		{[]string{"decode", "p"}, 2, "decode takes 2 argument(s), got 1"},
		{[]string{"list", "-o", "xml"}, 2, `-o "xml": use table, json or yaml`},
		{[]string{"check", "nope"}, 1, `NodeIPPool "nope" not found`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		code, _, errOut := plugin(kubeconfig, tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut, tt.code, tt.want)
		}
	}
	code, _, errOut := run([]string{"list", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, &bytes.Buffer{}, &bytes.Buffer{}), "", ""
	if code != 1 {
		t.Errorf("a missing kubeconfig: exit %d %s", code, errOut)
	}
}

// TestStructuredOutput: -o json is the same data as the table.
func TestStructuredOutput(t *testing.T) {
	k, kubeconfig := cluster(t)
	pool(t, k, "p", ippoolv1.IPRange{CIDR: "fd00::/64", Start: "fd00::1", End: "fd00::ff"}, "fd00::1")
	enactment(t, k, "node01", "v6", "p", "fd00::1")
	out := pluginOK(t, kubeconfig, "show", "p", "-o", "json")
	var d poolDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if d.Name != "p" || d.PrefixLength != 64 || len(d.Addresses) != 1 || d.Addresses[0].IP != "fd00::1" ||
		d.Addresses[0].State != stateAllocated || d.Addresses[0].Holders[0].Node != "node01" {
		t.Errorf("json show: %+v", d)
	}
	if code, out, _ := plugin(kubeconfig, "check", "-o", "yaml"); code != 0 || !strings.Contains(out, "- pool: p\n  problems: []") {
		t.Errorf("yaml check: exit %d\n%s", code, out)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

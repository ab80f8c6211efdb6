package nmstatectl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// sim is the simulator binary, built once for the package's tests.
var sim string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nmstatectl-sim-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sim = filepath.Join(dir, "nmstatectl-sim")
	build := exec.Command("go", "build", "-o", sim, "../../cmd/nmstatectl-sim")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the simulator: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func newRunner(t *testing.T) (Runner, string) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "node.yaml")
	return Runner{Path: sim, Env: []string{"NMSTATECTL_SIM_STATE=" + state}}, state
}

func interfaces(t *testing.T, r Runner) map[string]map[string]any {
	t.Helper()
	raw, err := r.Show(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Interfaces []map[string]any `json:"interfaces"`
	}
	if err := yaml.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, i := range s.Interfaces {
		out[i["name"].(string)] = i
	}
	return out
}

const eth1Static = `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: 10.10.10.8
      prefix-length: 24
- name: eth2
  state: absent
`

func TestApplyCommits(t *testing.T) {
	r, _ := newRunner(t)
	before := interfaces(t, r)
	if _, ok := before["eth2"]; !ok || len(before) != 3 {
		t.Fatalf("default state has %v", before)
	}
	if err := r.Apply(context.Background(), []byte(eth1Static)); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := interfaces(t, r)
	if _, ok := after["eth2"]; ok {
		t.Error("eth2 is still there after state: absent")
	}
	ipv4, _ := after["eth1"]["ipv4"].(map[string]any)
	if !strings.Contains(fmt.Sprint(ipv4["address"]), "10.10.10.8") || after["eth1"]["type"] != "ethernet" {
		t.Errorf("eth1 = %v", after["eth1"])
	}
	if _, ok := after["eth0"]; !ok {
		t.Error("eth0 was lost: interfaces must merge by name")
	}
}

func TestApplyWaitsForCommitOrRollback(t *testing.T) {
	ctx := context.Background()
	r, state := newRunner(t)
	if err := r.Apply(ctx, []byte(eth1Static)); err != nil {
		t.Fatal(err)
	}
	if _, ok := interfaces(t, r)["eth2"]; ok {
		t.Fatal("an uncommitted apply is not live")
	}
	if err := r.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state + ".checkpoint"); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the checkpoint was not rolled back")
	}
	if err := r.Rollback(ctx); err == nil {
		t.Error("a rollback with no checkpoint succeeded; nmstatectl fails")
	}
	if err := r.Commit(ctx); err == nil {
		t.Error("a commit with no checkpoint succeeded")
	}
	if _, ok := interfaces(t, r)["eth2"]; !ok {
		t.Fatal("a rolled back apply changed the state")
	}
}

func TestFailureCarriesOutput(t *testing.T) {
	for _, sub := range []string{"apply", "commit"} {
		t.Run(sub, func(t *testing.T) {
			ctx := context.Background()
			r, state := newRunner(t)
			if err := os.WriteFile(state+".fail", []byte(sub+": eth1: no such device\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := r.Apply(ctx, []byte(eth1Static))
			if err == nil {
				err = r.Commit(ctx)
				if rbErr := r.Rollback(ctx); rbErr != nil {
					t.Fatal(rbErr)
				}
			}
			var nmErr *Error
			if !errors.As(err, &nmErr) || !strings.Contains(err.Error(), "eth1: no such device") {
				t.Fatalf("%s = %v, want an *Error carrying the output", sub, err)
			}
			if _, ok := interfaces(t, r)["eth2"]; !ok {
				t.Fatal("a failed apply changed the state")
			}
			// Once the failure is gone, the same apply succeeds.
			if err := os.Remove(state + ".fail"); err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(ctx, []byte(eth1Static)); err != nil {
				t.Fatal(err)
			}
			if err := r.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCheckpointTimeout(t *testing.T) {
	r, state := newRunner(t)
	f := filepath.Join(t.TempDir(), "desired.yaml")
	if err := os.WriteFile(f, []byte(eth1Static), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(context.Background(), "apply", "--no-commit", "--timeout", "-1", f); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(context.Background(), "commit"); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("commit of an expired checkpoint = %v", err)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("an expired checkpoint was committed")
	}
}

func TestInvalidDesiredState(t *testing.T) {
	r, _ := newRunner(t)
	err := r.Apply(context.Background(), []byte("interfaces:\n- type: ethernet\n"))
	if err == nil || !strings.Contains(err.Error(), "has no name") {
		t.Fatalf("Apply = %v", err)
	}
}

// TestCommandTimeout: a command that does not answer is killed, and the
// error says it did not answer in time.
func TestCommandTimeout(t *testing.T) {
	script := filepath.Join(t.TempDir(), "nmstatectl")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Runner{Path: script, CommandTimeout: 200 * time.Millisecond}
	start := time.Now()
	_, err := r.Show(context.Background())
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Fatalf("Show = %v, want a timeout", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Show took %s", took)
	}
	if err := r.Rollback(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Rollback = %v, want a timeout", err)
	}
}

// TestWithoutAddressesApplied: the state WithoutAddresses returns, applied
// by the simulator, takes that address off and leaves the interface's
// other addresses and every other interface as they were.
func TestWithoutAddressesApplied(t *testing.T) {
	r, _ := newRunner(t)
	ctx := context.Background()
	if err := r.Apply(ctx, []byte(threeOnEth1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	current, err := r.Show(ctx)
	if err != nil {
		t.Fatal(err)
	}
	desired, _, err := netstate.WithoutAddresses(current, []netip.Addr{netip.MustParseAddr("10.10.10.8")})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(ctx, desired); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := r.Show(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := netstate.Carriers(after)
	if _, ok := got[netip.MustParseAddr("10.10.10.8")]; ok {
		t.Errorf("10.10.10.8 is still carried: %v", got)
	}
	for _, keep := range []string{"192.0.2.5", "fd00::8"} {
		if got[netip.MustParseAddr(keep)] != "eth1" {
			t.Errorf("%s left eth1: %v", keep, got)
		}
	}
	if len(netstate.Carriers(current))-1 != len(got) {
		t.Errorf("more than one address changed: before %v, after %v", netstate.Carriers(current), got)
	}
}

// threeOnEth1 is a state with three addresses on eth1 and another
// interface beside it.
const threeOnEth1 = `interfaces:
- name: eth0
  type: ethernet
  state: up
  ipv4: {enabled: true, dhcp: true, address: [{ip: 192.168.0.7, prefix-length: 16}]}
- name: eth1
  type: ethernet
  state: up
  ipv4: {enabled: true, dhcp: false, address: [{ip: 10.10.10.8, prefix-length: 24}, {ip: 192.0.2.5, prefix-length: 24}]}
  ipv6: {enabled: true, dhcp: false, autoconf: false, address: [{ip: "fd00::8", prefix-length: 64}]}
`

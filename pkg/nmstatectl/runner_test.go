package nmstatectl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
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

func TestStaticAddresses(t *testing.T) {
	state := []byte(`{"interfaces":[{"name":"eth0","ipv4":{"dhcp":true,"address":[{"ip":"192.168.0.9","prefix-length":16}]}},` +
		`{"name":"eth1","ipv4":{"address":[{"ip":"10.0.0.1","prefix-length":24}]},"ipv6":{"address":[{"ip":"fd00::1","prefix-length":64}]}},` +
		`{"name":"eth2","ipv6":{"address":[{"ip":"fd00::2","prefix-length":64}]}}]}`)
	got, err := StaticAddresses(state)
	if err != nil {
		t.Fatal(err)
	}
	want := []InterfaceAddresses{{Name: "eth1", Addresses: []string{"10.0.0.1/24", "fd00::1/64"}}, {Name: "eth2", Addresses: []string{"fd00::2/64"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := StaticAddresses([]byte("interfaces: [")); err == nil {
		t.Error("a broken state parsed")
	}
}

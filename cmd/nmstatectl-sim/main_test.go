package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newSim(t *testing.T, stdin string) *simulator {
	t.Helper()
	return &simulator{path: filepath.Join(t.TempDir(), "node.yaml"), now: time.Now, stdin: strings.NewReader(stdin)}
}

func run(t *testing.T, s *simulator, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := s.run(args, &out); err != nil {
		t.Fatalf("nmstatectl-sim %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// kubernetes-nmstate's handler applies from standard input with -vv, then
// commits; show prints YAML without --json, as nmstatectl does.
func TestApplyFromStandardInput(t *testing.T) {
	s := newSim(t, `{"interfaces":[{"name":"eth1","type":"ethernet","state":"up","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.5","prefix-length":24}]}}]}`)
	run(t, s, "apply", "-vv", "--no-commit", "--timeout", "480")
	run(t, s, "commit")
	shown := run(t, s, "show", "-vvv")
	if !strings.Contains(shown, "ip: 10.0.0.5") || strings.HasPrefix(shown, "{") {
		t.Fatalf("show should print YAML with the applied address; got:\n%s", shown)
	}
	var state map[string]any
	if err := json.Unmarshal([]byte(run(t, s, "show", "--json")), &state); err != nil {
		t.Fatalf("show --json: %v", err)
	}
}

// policy resolves captures against the live state (or --current), writes
// every capture to --output-captured and prints the desired state as JSON.
func TestPolicy(t *testing.T) {
	s := newSim(t, "")
	policy := writeFile(t, `{"capture":{"gw":"routes.running.destination==\"0.0.0.0/0\"",`+
		`"uplink":"interfaces.name==capture.gw.routes.running.0.next-hop-interface"},`+
		`"desiredState":{"interfaces":[{"name":"br1","type":"linux-bridge","state":"up",`+
		`"bridge":{"port":[{"name":"{{ capture.uplink.interfaces.0.name }}"}]}}]}}`)
	captured := writeFile(t, "")
	out := run(t, s, "policy", "--json", "--output-captured", captured, policy)
	var desired map[string]any
	if err := json.Unmarshal([]byte(out), &desired); err != nil {
		t.Fatalf("policy --json printed %q: %v", out, err)
	}
	if !strings.Contains(out, `"name":"eth0"`) {
		t.Errorf("the bridge's port should be the default route's interface, eth0; got %s", out)
	}
	raw, err := os.ReadFile(captured)
	if err != nil {
		t.Fatal(err)
	}
	var entries map[string]capturedFile
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatalf("captured file %q: %v", raw, err)
	}
	if len(entries) != 2 || entries["uplink"].MetaInfo.Version == "" || entries["uplink"].MetaInfo.Time.IsZero() {
		t.Fatalf("want both captures with their meta information; got %s", raw)
	}

	// The captures given with --captured are taken as they are: the
	// current state no longer matters.
	current := writeFile(t, "interfaces: []\nroutes:\n  running: []\n")
	again := run(t, s, "policy", "--current", current, "--json", "--captured", captured, "--output-captured", captured, policy)
	if again != out {
		t.Errorf("with the captures given, the rendered state should not change:\n%s\nvs\n%s", again, out)
	}
}

// A policy without captures or desired state prints nothing and writes
// "{}", which kubernetes-nmstate unmarshals.
func TestPolicyWithoutCaptures(t *testing.T) {
	s := newSim(t, "")
	captured := writeFile(t, "")
	if out := run(t, s, "policy", "--json", "--output-captured", captured, writeFile(t, "{}")); out != "" {
		t.Errorf("want no output; got %q", out)
	}
	if raw, _ := os.ReadFile(captured); string(raw) != "{}" {
		t.Errorf("want {}; got %q", raw)
	}
}

func TestStatistic(t *testing.T) {
	s := newSim(t, `{"interfaces":[],"dns-resolver":{"config":{}}}`)
	var got struct{ Features []string }
	if err := json.Unmarshal([]byte(run(t, s, "st", "-")), &got); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Features, ",") != "interfaces,dns-resolver" {
		t.Errorf("features: %v", got.Features)
	}
}

// The gateway answers while the uplink is up and stops answering when an
// apply takes it down, as kubernetes-nmstate's probe expects of a node.
func TestPing(t *testing.T) {
	s := newSim(t, `{"interfaces":[{"name":"eth0","state":"down"}]}`)
	var out bytes.Buffer
	if err := s.ping([]string{"-I", "eth0", "-c", "1", "192.168.0.1"}, &out); err != nil {
		t.Fatalf("the default gateway should answer on a new node: %v", err)
	}
	if err := s.ping([]string{"-I", "eth1", "-c", "1", "192.168.0.1"}, &out); err == nil {
		t.Error("the gateway should not answer through eth1, which has no address")
	}
	run(t, s, "apply")
	if err := s.ping([]string{"-I", "eth0", "-c", "1", "192.168.0.1"}, &out); err == nil {
		t.Error("the gateway should not answer once eth0 is down")
	}
}

// An interface made a port of a bond or a bridge has no IP: nmstate
// refuses a desired state that enables it there, and takes off what it
// had. A VRF's ports and an OVS bridge's internal interface keep theirs.
func TestPortsHaveNoIP(t *testing.T) {
	for _, tt := range []struct {
		name, desired string
		refused       bool
		loses         bool   // eth1 loses its address
		keeps         string // an interface that keeps its address
	}{
		{name: "IP on a bridge's port", refused: true,
			desired: `{"interfaces":[{"name":"br0","type":"linux-bridge","bridge":{"port":[{"name":"eth1"}]}},{"name":"eth1","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.5","prefix-length":24}]}}]}`},
		{name: "IP on a bond's port named by controller", refused: true,
			desired: `{"interfaces":[{"name":"bond0","type":"bond","link-aggregation":{"port":[]}},{"name":"eth1","controller":"bond0","ipv4":{"enabled":true}}]}`},
		{name: "a port loses its address", loses: true,
			desired: `{"interfaces":[{"name":"br0","type":"linux-bridge","bridge":{"port":[{"name":"eth1"}]}}]}`},
		{name: "a VRF's port keeps it", keeps: "eth1",
			desired: `{"interfaces":[{"name":"vrf0","type":"vrf","vrf":{"port":["eth1"],"route-table-id":100}}]}`},
		{name: "IP on an OVS bridge's port, the bridge listed before its internal interface", refused: true,
			desired: `{"interfaces":[{"name":"ovs0","type":"ovs-bridge","bridge":{"port":[{"name":"ovs0"},{"name":"eth1"}]}},` +
				`{"name":"ovs0","type":"ovs-interface"},{"name":"eth1","ipv4":{"enabled":true}}]}`},
		{name: "an interface a bond no longer lists is no port",
			desired: `{"interfaces":[{"name":"bond0","type":"bond","link-aggregation":{"port":[]}},{"name":"eth1","controller":"bond0","ipv4":{"enabled":false}}]}` +
				"\n" + `{"interfaces":[{"name":"eth1","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.5","prefix-length":24}]}}]}`},
		{name: "an OVS bridge's internal interface keeps it", keeps: "ovs0",
			desired: `{"interfaces":[{"name":"ovs0","type":"ovs-interface","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.7","prefix-length":24}]}},` +
				`{"name":"ovs0","type":"ovs-bridge","bridge":{"port":[{"name":"ovs0"},{"name":"eth2"}]}}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t, `{"interfaces":[{"name":"eth1","type":"ethernet","state":"up","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.5","prefix-length":24}]}}]}`)
			run(t, s, "apply")
			steps := strings.Split(tt.desired, "\n") // applied in turn
			for _, step := range steps[:len(steps)-1] {
				s.stdin = strings.NewReader(step)
				run(t, s, "apply")
			}
			s.stdin = strings.NewReader(steps[len(steps)-1])
			var out bytes.Buffer
			err := s.run([]string{"apply"}, &out)
			if tt.refused {
				if err == nil || !strings.Contains(err.Error(), "cannot have IP enabled") {
					t.Fatalf("applied, or refused otherwise: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			shown := run(t, s, "show")
			if has := strings.Contains(shown, "10.0.0.5"); has == tt.loses {
				t.Errorf("eth1 has its address: %v, want %v\n%s", has, !tt.loses, shown)
			}
			if tt.keeps == "ovs0" && !strings.Contains(shown, "10.0.0.7") {
				t.Errorf("the internal interface lost its address:\n%s", shown)
			}
		})
	}
}
